"""Ramp-up parity: our step plan against megatron-core's own batch-size calculator, driven the way
Megatron-LM's training loop drives it (consumed samples in, global batch size out, every step)."""

from __future__ import annotations

import numpy as np
import pytest

calculator = pytest.importorskip("megatron.core.num_microbatches_calculator")

from jaxblend.sampling import Rampup, RampupStepPlan

pytestmark = pytest.mark.parity


def megatron_steps(rampup, gbs, micro, dp, decrease, steps):
    """(consumed samples before the step, samples the step consumes), per training iteration.

    As Megatron-LM's `train()`: the calculator is updated with the consumed samples before every
    iteration (first without, then with the consistency check), the iteration trains on
    `num_microbatches x micro_batch_size x data_parallel_size` samples, and `consumed_train_samples`
    grows by that. The pretraining sampler reads those samples consecutively.
    """
    calculator.init_num_microbatches_calculator(
        0, [rampup.start, rampup.increment, rampup.ramp_samples], gbs, micro, dp, decrease
    )
    try:
        consumed, out = 0, []
        for _ in range(steps):
            calculator.update_num_microbatches(consumed, consistency_check=False)
            calculator.update_num_microbatches(consumed, consistency_check=True)
            size = dp * micro * calculator.get_num_microbatches()
            assert size == calculator.get_current_running_global_batch_size()
            out.append((consumed, size))
            consumed += size
        return out
    finally:
        calculator.destroy_num_microbatches_calculator()


SETTINGS = [
    # (START, INCREMENT, RAMP_SAMPLES), global batch, micro batch, data parallel, decrease
    ((16, 16, 1000), 128, 1, 1, False),
    ((32, 32, 3000), 256, 2, 4, False),  # sizes are multiples of micro x dp
    ((3, 3, 77), 30, 1, 3, False),  # RAMP_SAMPLES not divisible by the 9 increments
    ((5, 5, 333), 40, 2, 2, True),  # sizes rounded down to multiples of 4
    ((8, 8, 1), 64, 1, 8, False),  # a ramp shorter than one step
    ((6, 6, 50), 54, 1, 4, True),
    ((12, 4, 12_345), 96, 4, 1, False),
]


@pytest.mark.parametrize("ramp, gbs, micro, dp, decrease", SETTINGS)
def test_every_step_consumes_megatrons_samples(ramp, gbs, micro, dp, decrease):
    rampup = Rampup(*ramp)
    steps = 400
    reference = megatron_steps(rampup, gbs, micro, dp, decrease, steps)
    plan = RampupStepPlan(rampup, gbs, steps, micro_batch_size=micro, data_parallel_size=dp,
                          decrease_batch_size_if_needed=decrease)
    assert reference[-1][1] == plan.batch_size(steps - 1)  # the ramp is over within the steps
    for k, (consumed, size) in enumerate(reference):
        ids = plan.sample_ids(k)
        assert (plan.first_sample(k), ids.size) == (consumed, size), k
        np.testing.assert_array_equal(ids, np.arange(consumed, consumed + size))
    assert {s for _, s in reference} == {shape.rows for shape in plan.batch_shapes()}


def test_resumed_calculator_agrees_mid_ramp():
    """Megatron resumes from `consumed_train_samples`; our plan from a step: the same sizes."""
    rampup, gbs = Rampup(32, 32, 3000), 256
    plan = RampupStepPlan(rampup, gbs, 200)
    reference = megatron_steps(rampup, gbs, 1, 1, False, 200)
    k = 17
    assert plan.batch_size(k) < gbs  # in the middle of the ramp
    calculator.init_num_microbatches_calculator(
        0, [rampup.start, rampup.increment, rampup.ramp_samples], gbs, 1, 1
    )
    try:
        calculator.update_num_microbatches(reference[k][0], consistency_check=True)
        assert calculator.get_current_running_global_batch_size() == plan.batch_size(k)
    finally:
        calculator.destroy_num_microbatches_calculator()

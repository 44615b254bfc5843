"""`StepPlan.batch_shapes(from_step)` for every plan kind, and `ProcessRows` built from a step:
only the batch sizes a run still takes must split over the mesh (a resume in the middle of a
batch-size schedule on more data shards than its early batches allow)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxblend.sampling import (
    BatchShape,
    FixedStepPlan,
    ProcessRows,
    Rampup,
    RampupStepPlan,
    StepBatchSchedule,
    StepBatchSchedulePlan,
    TokenBudgetConfig,
    plan_token_budget,
)
from jaxblend.sampling.phases import PhaseTransitions


def shapes_step_by_step(plan, from_step, first=0):
    """The reference: the shape of every step from `from_step` on, one at a time."""
    return frozenset(
        BatchShape(plan.batch_size(k), plan.padded_length(k))
        for k in range(max(from_step, first), plan.num_steps)
    )


def token_budget_plan():
    lengths = np.clip(np.random.default_rng(3).lognormal(3.5, 0.9, 600), 1, 128).astype(np.int64)
    config = TokenBudgetConfig(bucket_width=16, max_length=128, token_budget=512, seed=2)
    return plan_token_budget(lengths, config)


PLANS = {
    "fixed": FixedStepPlan(8, 6),
    "rampup": RampupStepPlan(Rampup(4, 4, 60), 16, 12),
    "step_schedule": StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:8 40:16 100:32 180:8"), 24),
    "step_schedule_skipped_entry": StepBatchSchedulePlan(
        StepBatchSchedule.from_megatron("0:30 10:4 50:12"), 9  # 10:4 is never reached
    ),
    "token_budget": token_budget_plan(),
}


@pytest.mark.parametrize("name", PLANS)
def test_shapes_from_every_step_match_the_steps(name):
    plan = PLANS[name]
    assert plan.num_steps > 3
    for k in range(plan.num_steps + 1):
        assert plan.batch_shapes(k) == shapes_step_by_step(plan, k), k
    assert plan.batch_shapes() == plan.batch_shapes(0)
    assert plan.batch_shapes(plan.num_steps) == frozenset()


@pytest.mark.parametrize("name", PLANS)
@pytest.mark.parametrize("bad", [-1, "end + 1"])
def test_from_step_out_of_range_is_refused(name, bad):
    plan = PLANS[name]
    step = plan.num_steps + 1 if bad == "end + 1" else bad
    with pytest.raises(IndexError, match=f"from_step {step} out of range"):
        plan.batch_shapes(step)


def test_shapes_shrink_as_a_schedule_moves_on():
    plan = PLANS["step_schedule"]  # 8 x 5 steps, 16 x 4, 32 x 3, then 8
    assert {s.rows for s in plan.batch_shapes(5)} == {16, 32, 8}
    assert {s.rows for s in plan.batch_shapes(9)} == {32, 8}
    assert {s.rows for s in plan.batch_shapes(12)} == {8}
    ramp = PLANS["rampup"]
    assert {s.rows for s in ramp.batch_shapes(ramp.ramp_steps)} == {16}
    assert len(ramp.batch_shapes(0)) == 4


def test_a_long_plan_answers_from_its_runs():
    rampup = Rampup(32, 32, 5_859_375)
    plan = RampupStepPlan(rampup, 1536, num_steps=1_000_000)
    assert len(plan.batch_shapes(0)) == 48
    assert plan.batch_shapes(plan.ramp_steps) == {BatchShape(1536, None)}
    assert plan.batch_shapes(plan.ramp_steps - 1) == {BatchShape(1504, None), BatchShape(1536, None)}


def test_phase_plan_shapes():
    transitions = PhaseTransitions((3, 7), global_batch_size=8, train_steps=10)
    middle = transitions.plan(1)  # steps [3, 7)
    for k in range(middle.num_steps + 1):
        assert middle.batch_shapes(k) == shapes_step_by_step(middle, k, first=3), k
    assert middle.batch_shapes(0) == {BatchShape(8, None)}  # before the phase: all of it runs
    with pytest.raises(IndexError, match="from_step 8 out of range"):
        middle.batch_shapes(8)


def test_segment_sizes_between():
    # Runs (first step, first sample, size): (0, 0, 8), (5, 40, 16), (9, 104, 32), (12, 200, 8).
    plan = StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:8 40:16 104:32 200:8"), 0)
    assert [a.tolist() for a in plan._segments] == [[0, 5, 9, 12], [0, 40, 104, 200], [8, 16, 32, 8]]

    def sizes_between(start, stop):
        return {s.rows for s in dataclasses.replace(plan, num_steps=stop).batch_shapes(start)}

    assert sizes_between(0, 5) == {8}
    assert sizes_between(4, 6) == {8, 16}
    assert sizes_between(9, 12) == {32}
    assert sizes_between(11, 10**12) == {32, 8}
    assert sizes_between(7, 7) == frozenset()
    assert sizes_between(0, 9) == {8, 16}


def data_sharding(shards):
    return NamedSharding(Mesh(np.array(jax.devices()[:shards]), ("data",)), P("data"))


@dataclasses.dataclass(frozen=True)
class PretendDevice:
    id: int
    process_index: int


class PretendProcesses:
    """The batch sharding over 8 data shards, its devices shared evenly by `processes` pretend
    processes (pytest's JAX has 8 CPU devices in one process)."""

    def __init__(self, processes: int):
        self.sharding = data_sharding(8)
        self.per = 8 // processes

    def devices_indices_map(self, shape):
        return {PretendDevice(d.id, i // self.per): index for i, (d, index) in
                enumerate(self.sharding.devices_indices_map(shape).items())}


class TestProcessRowsFromStep:
    # 4 rows x 10 steps (samples 0..40), 16 x 4 (..104), then 32.
    PLAN = StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:4 40:16 100:32"), 16)

    def test_from_step_0_is_refused_with_one_line(self):
        with pytest.raises(ValueError, match=r"batches of 4 rows, which the mesh's batch axes") as err:
            ProcessRows.of(self.PLAN, data_sharding(8), 0)
        assert "\n" not in str(err.value) and "at or after" not in str(err.value)

    def test_from_a_later_step_only_its_sizes_are_needed(self):
        k = self.PLAN.steps_within(40)
        assert self.PLAN.batch_size(k - 1) == 4 and self.PLAN.batch_size(k) == 16
        share = ProcessRows.of(self.PLAN, data_sharding(8), 0, from_step=k)
        assert share.from_step == k and sorted(share.rows_by_size) == [16, 32]
        for step in range(k, self.PLAN.num_steps):  # one process holds the whole mesh
            np.testing.assert_array_equal(share.sample_ids(step), self.PLAN.sample_ids(step))
        with pytest.raises(IndexError, match=f"step {k - 1} is before step {k}, the first step"):
            share.rows(k - 1)
        with pytest.raises(ValueError, match=f"batches of 4 rows at or after step {k - 1}, which"):
            ProcessRows.of(self.PLAN, data_sharding(8), 0, from_step=k - 1)

    def test_from_step_out_of_range(self):
        with pytest.raises(IndexError, match="from_step 17 out of range"):
            ProcessRows.of(self.PLAN, data_sharding(2), 0, from_step=17)
        end = ProcessRows.of(self.PLAN, data_sharding(8), 0, from_step=16)
        assert dict(end.rows_by_size) == {}

    @pytest.mark.parametrize("processes", [2, 4])
    def test_processes_from_a_step_together_load_each_step_once(self, processes):
        """Steps before k ran on 2 data shards; from k on, 8 shards over `processes` processes."""
        k = self.PLAN.steps_within(100) - 1  # the last 16-row step
        early = ProcessRows.of(self.PLAN, data_sharding(2), 0)
        shares = [ProcessRows.of(self.PLAN, PretendProcesses(processes), p, from_step=k)
                  for p in range(processes)]
        run = [early.sample_ids(step) for step in range(k)]
        for step in range(k, self.PLAN.num_steps):
            parts = [share.sample_ids(step) for share in shares]
            assert {part.size for part in parts} == {self.PLAN.batch_size(step) // processes}
            run.append(np.concatenate(parts))
        np.testing.assert_array_equal(np.concatenate(run), np.arange(self.PLAN.num_samples))

"""`--global_batch_size`, `--rampup_batch_size` and the step plan they describe.

Used by the programs that form global batches (`jaxblend.train`, `jaxblend.tools.dump_batches`,
`jaxblend.tools.inspect`). With `--rampup_batch_size`, global batches follow Megatron-LM's
`--rampup-batch-size` (`jaxblend.sampling.RampupStepPlan`); without it, every step has
`--global_batch_size` samples.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from absl import app, flags

from jaxblend.cli import data_flags

if TYPE_CHECKING:  # the sampling layer imports JAX: deferred to the functions that plan steps
    from jaxblend.sampling import Rampup, StepPlan

# Flags given as space-separated lists in Megatron-LM's spelling (see `megatron_argv`).
MEGATRON_NARGS = (*data_flags.MEGATRON_NARGS, "rampup_batch_size")


def define_step_plan_flags(default_global_batch_size: int = 8) -> None:
    """Defines `--global_batch_size` and `--rampup_batch_size`."""
    flags.DEFINE_integer(
        "global_batch_size", default_global_batch_size,
        "Global batch size (the size after a --rampup_batch_size ramp).", lower_bound=1,
    )
    flags.DEFINE_string(
        "rampup_batch_size", None,
        "Megatron-LM's --rampup-batch-size: 'START INCREMENT RAMP_SAMPLES'. The global batch "
        "size starts at START and grows by INCREMENT over RAMP_SAMPLES samples up to "
        "--global_batch_size, computed from the samples consumed so far, exactly as Megatron "
        "does; step k holds the next batch-size samples of the split.",
    )


def rampup_from_flags() -> Rampup | None:
    """The ramp of `--rampup_batch_size`, or None.

    Raises:
      app.UsageError: one line naming the flag.
    """
    from jaxblend.sampling import Rampup

    value = flags.FLAGS.rampup_batch_size
    if not value:
        return None
    try:
        return Rampup.parse(value)
    except ValueError as err:
        raise app.UsageError(str(err)) from None


def step_plan(num_samples: int, global_batch_size: int, num_steps: int | None = None) -> StepPlan:
    """The step plan of the flags over a source of `num_samples` samples.

    Args:
      num_samples: samples of the source.
      global_batch_size: `--global_batch_size` (the size after a ramp).
      num_steps: steps wanted; None = every full step of the source.

    Raises:
      app.UsageError: if the ramp does not fit `--global_batch_size`, or the steps need more
        samples than the source has.
    """
    from jaxblend.sampling import FixedStepPlan, RampupStepPlan

    rampup = rampup_from_flags()
    try:
        if rampup is None:
            return FixedStepPlan.covering(num_samples, global_batch_size, num_steps)
        return RampupStepPlan.covering(num_samples, rampup, global_batch_size, num_steps)
    except ValueError as err:
        raise app.UsageError(str(err)) from None


def samples_for(global_batch_size: int, num_steps: int) -> int:
    """Samples `num_steps` steps of the flags' plan consume (`--train_samples` of a run)."""
    return planned_steps(global_batch_size, num_steps).num_samples


def planned_steps(global_batch_size: int, num_steps: int | None = None) -> StepPlan:
    """The flags' plan without a source: `num_steps` steps, or (None) the ramp and one full step,
    which shows every batch shape.

    Raises:
      app.UsageError: if the ramp does not fit `--global_batch_size`.
    """
    from jaxblend.sampling import FixedStepPlan, RampupStepPlan

    rampup = rampup_from_flags()
    if rampup is None:
        return FixedStepPlan(global_batch_size, 1 if num_steps is None else num_steps)
    try:
        plan = RampupStepPlan(rampup, global_batch_size, 0 if num_steps is None else num_steps)
    except ValueError as err:
        raise app.UsageError(str(err)) from None
    if num_steps is None:
        return dataclasses.replace(plan, num_steps=plan.ramp_steps + 1)
    return plan

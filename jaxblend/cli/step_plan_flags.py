"""`--global_batch_size`, `--rampup_batch_size`, `--step_batch_size_schedule` and the step plan
they describe.

Used by the programs that form global batches (`jaxblend.train`, `jaxblend.tools.dump_batches`,
`jaxblend.tools.inspect`). With `--rampup_batch_size`, global batches follow Megatron-LM's
`--rampup-batch-size` (`jaxblend.sampling.RampupStepPlan`); with `--step_batch_size_schedule`,
megatron-core's `--step-batch-size-schedule` (`jaxblend.sampling.StepBatchSchedulePlan`, its
thresholds in tokens of `--seq_length`); with neither, every step has `--global_batch_size`
samples.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from absl import app, flags

from jaxblend.cli import data_flags

if TYPE_CHECKING:  # the sampling layer imports JAX: deferred to the functions that plan steps
    from jaxblend.sampling import Rampup, StepBatchSchedule, StepPlan

# Flags given as space-separated lists in Megatron-LM's spelling (see `megatron_argv`).
# `--step-batch-size-schedule` is one quoted argument in Megatron, so it is not among them.
MEGATRON_NARGS = (*data_flags.MEGATRON_NARGS, "rampup_batch_size")


def define_step_plan_flags(default_global_batch_size: int = 8) -> None:
    """Defines `--global_batch_size`, `--rampup_batch_size` and `--step_batch_size_schedule`."""
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
    flags.DEFINE_string(
        "step_batch_size_schedule", None,
        "megatron-core's --step-batch-size-schedule: 'THRESHOLD:BATCH_SIZE ...', e.g. "
        "'0:768 250B:1536 500B:3072'. Thresholds count tokens (converted to samples by integer "
        "division by --seq_length; samples when no --seq_length is set) and take K/M/B/T "
        "suffixes; each step's global batch size is that of the last threshold reached by the "
        "samples consumed so far, and step k holds the next batch-size samples of the split. "
        "Replaces --global_batch_size and --rampup_batch_size.",
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


def step_batch_schedule_from_flags() -> StepBatchSchedule | None:
    """The schedule of `--step_batch_size_schedule` (thresholds in tokens of `--seq_length`), or
    None.

    Raises:
      app.UsageError: one line naming the flag: a bad schedule, or the schedule together with
        `--rampup_batch_size` or an explicit `--global_batch_size` (as Megatron, which takes the
        final batch size from the schedule).
    """
    from jaxblend.sampling import StepBatchSchedule

    fl = flags.FLAGS
    value = fl.step_batch_size_schedule
    if value is None:
        return None
    if fl.rampup_batch_size:
        raise app.UsageError(
            "--step_batch_size_schedule and --rampup_batch_size both describe the batch-size "
            "schedule: give one (a ramp 'START INCREMENT RAMP_SAMPLES' is the schedule "
            "'0:START T1:START+INCREMENT ...' with thresholds at the ramp's steps)"
        )
    if fl["global_batch_size"].present:
        raise app.UsageError(
            f"--step_batch_size_schedule={value!r} sets every batch size (the last entry is the "
            "final global batch size): drop --global_batch_size, as Megatron refuses both"
        )
    seq_length = fl.seq_length if "seq_length" in fl else None
    try:
        return StepBatchSchedule.from_megatron(value, seq_length)
    except ValueError as err:
        raise app.UsageError(str(err)) from None


def final_global_batch_size(global_batch_size: int) -> int:
    """The global batch size the flags' plan ends at: the schedule's last size, or
    `global_batch_size` (`--global_batch_size`, also the size after a ramp).

    Raises:
      app.UsageError: as `step_batch_schedule_from_flags`.
    """
    schedule = step_batch_schedule_from_flags()
    return global_batch_size if schedule is None else schedule.global_batch_size


def step_plan(num_samples: int, global_batch_size: int, num_steps: int | None = None) -> StepPlan:
    """The step plan of the flags over a source of `num_samples` samples.

    Args:
      num_samples: samples of the source.
      global_batch_size: `--global_batch_size` (the size after a ramp; unused with a schedule).
      num_steps: steps wanted; None = every full step of the source.

    Raises:
      app.UsageError: if the ramp does not fit `--global_batch_size`, the schedule flags are
        inconsistent, or the steps need more samples than the source has.
    """
    from jaxblend.sampling import FixedStepPlan, RampupStepPlan, StepBatchSchedulePlan

    schedule = step_batch_schedule_from_flags()
    rampup = rampup_from_flags()
    try:
        if schedule is not None:
            return StepBatchSchedulePlan.covering(num_samples, schedule, num_steps)
        if rampup is None:
            return FixedStepPlan.covering(num_samples, global_batch_size, num_steps)
        return RampupStepPlan.covering(num_samples, rampup, global_batch_size, num_steps)
    except ValueError as err:
        raise app.UsageError(str(err)) from None


def samples_for(global_batch_size: int, num_steps: int) -> int:
    """Samples `num_steps` steps of the flags' plan consume (`--train_samples` of a run)."""
    return planned_steps(global_batch_size, num_steps).num_samples


def planned_steps(global_batch_size: int, num_steps: int | None = None) -> StepPlan:
    """The flags' plan without a source: `num_steps` steps, or (None) the ramp or schedule and
    one step of its final size, which shows every batch shape.

    Raises:
      app.UsageError: if the ramp does not fit `--global_batch_size`, or the schedule flags are
        inconsistent.
    """
    from jaxblend.sampling import FixedStepPlan, RampupStepPlan, StepBatchSchedulePlan

    schedule = step_batch_schedule_from_flags()
    if schedule is not None:
        plan = StepBatchSchedulePlan(schedule, 0 if num_steps is None else num_steps)
        if num_steps is None:
            return dataclasses.replace(plan, num_steps=plan.schedule_steps + 1)
        return plan
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

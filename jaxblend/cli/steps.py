"""The step-plan flags and `StepSettings`: the step plan of a run (global batch sizes over steps,
steps, evaluation), and the one rule that turns it into the sample counts of the data
configuration.

`define_step_plan_flags()` defines `--global_batch_size`, `--rampup_batch_size`,
`--step_batch_size_schedule` (the global batch size of every step), `--train_iters` (the run's
steps), `--eval_interval` and `--eval_iters` (validation batches) in every program that reads a
data configuration (`jaxblend.train` and the tools), with the same defaults everywhere, so the
same flags give the same data configuration, index-map key and publication key in every program.
`StepSettings.from_values` builds the settings from their values (no absl flag is read there).
With `--rampup_batch_size`, global batches follow Megatron-LM's `--rampup-batch-size`
(`jaxblend.sampling.RampupStepPlan`); with `--step_batch_size_schedule`, megatron-core's
`--step-batch-size-schedule` (`jaxblend.sampling.StepBatchSchedulePlan`, its thresholds in tokens
of `--seq_length`, turned into samples once, when the settings are built: the sequence length
itself is the data configuration's); with neither, every step has `global_batch_size` samples.

Sample counts (`sample_counts`), the same in every tool and in training:

  train  `--train_samples`, else the samples of `--train_iters` steps of the plan;
  valid  `--valid_samples`, else `--eval_iters` batches of the final global batch size
         (0 with `--eval_interval=0`: no evaluation);
  test   `--test_samples`, else 0.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from absl import app, flags

from jaxblend.cli import data_flags, flag_help, flag_values
from jaxblend.cli.entry import usage_errors

if TYPE_CHECKING:
    from jaxblend.sampling import Rampup, StepBatchSchedule, StepPlan


# Flags given as space-separated lists in Megatron-LM's spelling (see `megatron_argv`).
# `--step-batch-size-schedule` is one quoted argument in Megatron, so it is not among them.
MEGATRON_NARGS = (*data_flags.MEGATRON_NARGS, "rampup_batch_size")


def define_step_plan_flags() -> None:
    """Defines the step-plan flags (once per program)."""
    with flag_help.group(flag_help.STEPS):
        flags.DEFINE_integer(
            "global_batch_size", flag_values.DEFAULT_GLOBAL_BATCH_SIZE,
            "Global batch size (the size after a --rampup_batch_size ramp).", lower_bound=1,
        )
        flags.DEFINE_string(
            "rampup_batch_size", None,
            "Megatron-LM's --rampup-batch-size: 'START INCREMENT RAMP_SAMPLES'. The global batch "
            "size starts at START and grows by INCREMENT over RAMP_SAMPLES samples up to "
            "--global_batch_size, computed from the samples consumed so far, exactly as Megatron "
            "does; step k holds the next batch-size samples of the split (default: none, every "
            "step holds --global_batch_size samples).",
        )
        flags.DEFINE_string(
            "step_batch_size_schedule", None,
            "megatron-core's --step-batch-size-schedule: 'THRESHOLD:BATCH_SIZE ...', e.g. "
            "'0:768 250B:1536 500B:3072'. Thresholds count tokens (converted to samples by integer "
            "division by --seq_length; samples when no --seq_length is set) and take K/M/B/T "
            "suffixes; each step's global batch size is that of the last threshold reached by the "
            "samples consumed so far, and step k holds the next batch-size samples of the split. "
            "Replaces --global_batch_size and --rampup_batch_size (default: none).",
        )
        flags.DEFINE_integer(
            "train_iters", flag_values.DEFAULT_TRAIN_ITERS,
            "Training steps (the train split holds their samples unless --train_samples is given).",
            lower_bound=1,
        )
        flags.DEFINE_integer(
            "eval_interval", flag_values.DEFAULT_EVAL_INTERVAL,
            "Steps between validations (0 = never).", lower_bound=0,
        )
        flags.DEFINE_integer(
            "eval_iters", flag_values.DEFAULT_EVAL_ITERS,
            "Validation batches per evaluation (the valid split holds them unless --valid_samples "
            "is given).", lower_bound=1,
        )


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """The run's steps and global batch sizes.

    Attributes:
      global_batch_size: the size of every step (the size after a ramp; unused with a schedule).
      rampup_batch_size: Megatron's `--rampup-batch-size` "START INCREMENT RAMP_SAMPLES", or None.
      step_batch_size_schedule: megatron-core's `--step-batch-size-schedule` as given, or None.
      schedule_in_samples: that schedule with its thresholds in samples (`--seq_length`'s tokens
        each; samples when no `--seq_length` is set), or None.
      global_batch_size_given: `--global_batch_size` was given explicitly (refused beside a
        schedule, as Megatron does).
      train_iters: the run's training steps.
      eval_interval: steps between evaluations (0: none).
      eval_iters: batches per evaluation.
    """

    global_batch_size: int = flag_values.DEFAULT_GLOBAL_BATCH_SIZE
    rampup_batch_size: str | None = None
    step_batch_size_schedule: str | None = None
    global_batch_size_given: bool = False
    schedule_in_samples: StepBatchSchedule | None = None
    train_iters: int = flag_values.DEFAULT_TRAIN_ITERS
    eval_interval: int = flag_values.DEFAULT_EVAL_INTERVAL
    eval_iters: int = flag_values.DEFAULT_EVAL_ITERS

    @classmethod
    def from_values(cls, values: flag_values.DataFlagValues) -> StepSettings:
        """The settings of the step-plan flags' values.

        Raises:
          app.UsageError: one line naming `--step_batch_size_schedule`, if it does not parse.
        """
        from jaxblend.sampling import StepBatchSchedule

        schedule = values.step_batch_size_schedule
        with usage_errors():
            in_samples = None if schedule is None else StepBatchSchedule.from_megatron(
                schedule, values.seq_length
            )
        return cls(
            global_batch_size=values.global_batch_size,
            rampup_batch_size=values.rampup_batch_size or None,
            step_batch_size_schedule=schedule,
            global_batch_size_given=values.global_batch_size_given,
            schedule_in_samples=in_samples,
            train_iters=values.train_iters,
            eval_interval=values.eval_interval,
            eval_iters=values.eval_iters,
        )

    def rampup(self) -> Rampup | None:
        """The ramp of `--rampup_batch_size`, or None.

        Raises:
          app.UsageError: one line naming the flag.
        """
        from jaxblend.sampling import Rampup

        if not self.rampup_batch_size:
            return None
        with usage_errors():
            return Rampup.parse(self.rampup_batch_size)

    def batch_schedule(self) -> StepBatchSchedule | None:
        """The schedule of `--step_batch_size_schedule` in samples, or None.

        Raises:
          app.UsageError: one line naming the flag: the schedule together with
            `--rampup_batch_size` or an explicit `--global_batch_size` (as Megatron, which takes
            the final batch size from the schedule).
        """
        value = self.step_batch_size_schedule
        if value is None:
            return None
        if self.rampup_batch_size:
            raise app.UsageError(
                "--step_batch_size_schedule and --rampup_batch_size both describe the batch-size "
                "schedule: give one (a ramp 'START INCREMENT RAMP_SAMPLES' is the schedule "
                "'0:START T1:START+INCREMENT ...' with thresholds at the ramp's steps)"
            )
        if self.global_batch_size_given:
            raise app.UsageError(
                f"--step_batch_size_schedule={value!r} sets every batch size (the last entry is "
                "the final global batch size): drop --global_batch_size, as Megatron refuses both"
            )
        return self.schedule_in_samples

    @property
    def final_global_batch_size(self) -> int:
        """The global batch size the plan ends at: the schedule's last size, or
        `global_batch_size` (also the size after a ramp).

        Raises:
          app.UsageError: as `batch_schedule`.
        """
        schedule = self.batch_schedule()
        return self.global_batch_size if schedule is None else schedule.global_batch_size

    @property
    def eval_batches(self) -> int:
        """Validation batches per evaluation (0 when evaluation is off)."""
        return self.eval_iters if self.eval_interval else 0

    def covering(self, num_samples: int, num_steps: int | None = None) -> StepPlan:
        """The plan over a source of `num_samples` samples.

        Args:
          num_samples: samples of the source.
          num_steps: steps wanted; None = every full step of the source.

        Raises:
          app.UsageError: if the ramp does not fit `global_batch_size`, the schedule settings
            are inconsistent, or the steps need more samples than the source has.
        """
        from jaxblend.sampling import FixedStepPlan, RampupStepPlan, StepBatchSchedulePlan

        schedule = self.batch_schedule()
        rampup = self.rampup()
        with usage_errors():
            if schedule is not None:
                return StepBatchSchedulePlan.covering(num_samples, schedule, num_steps)
            if rampup is None:
                return FixedStepPlan.covering(num_samples, self.global_batch_size, num_steps)
            return RampupStepPlan.covering(num_samples, rampup, self.global_batch_size, num_steps)

    def planned(self, num_steps: int | None = None) -> StepPlan:
        """The plan without a source: `num_steps` steps, or (None) the ramp or schedule and one
        step of its final size, which shows every batch shape.

        Raises:
          app.UsageError: if the ramp does not fit `global_batch_size`, or the schedule settings
            are inconsistent.
        """
        from jaxblend.sampling import FixedStepPlan, RampupStepPlan, StepBatchSchedulePlan

        schedule = self.batch_schedule()
        if schedule is not None:
            plan = StepBatchSchedulePlan(schedule, 0 if num_steps is None else num_steps)
            if num_steps is None:
                return dataclasses.replace(plan, num_steps=plan.schedule_steps + 1)
            return plan
        rampup = self.rampup()
        if rampup is None:
            return FixedStepPlan(self.global_batch_size, 1 if num_steps is None else num_steps)
        with usage_errors():
            plan = RampupStepPlan(
                rampup, self.global_batch_size, 0 if num_steps is None else num_steps
            )
        if num_steps is None:
            return dataclasses.replace(plan, num_steps=plan.ramp_steps + 1)
        return plan

    def samples_for(self, num_steps: int) -> int:
        """Samples `num_steps` steps of the plan consume."""
        return self.planned(num_steps).num_samples

    def sample_counts(
        self, train: int | None, valid: int | None, test: int | None
    ) -> tuple[int, int, int]:
        """The data configuration's `(train, valid, test)` sample counts: the given ones, the
        others derived from the steps (the module docstring's rule).

        Raises:
          app.UsageError: as `planned` (the train count needs the plan).
        """
        return (
            train if train is not None else self.samples_for(self.train_iters),
            valid if valid is not None else self.eval_batches * self.final_global_batch_size,
            test if test is not None else 0,
        )


"""The step-plan flags: `--global_batch_size`, `--rampup_batch_size`, `--step_batch_size_schedule`
(the global batch size of every step), `--train_iters` (the run's steps) and `--eval_interval`,
`--eval_iters` (validation batches), and the `StepSettings` they describe.

Defined by every program that reads a data configuration (`jaxblend.train` and the tools), with
the same defaults everywhere: the sample counts not given by `--train_samples`,
`--valid_samples`, `--test_samples` derive from these flags (`jaxblend.cli.steps`), so the same
flags give the same data configuration, index-map key and publication key in every program.
With `--rampup_batch_size`, global batches follow Megatron-LM's `--rampup-batch-size`; with
`--step_batch_size_schedule`, megatron-core's `--step-batch-size-schedule` (thresholds in tokens
of `--seq_length`); with neither, every step has `--global_batch_size` samples.
"""

from __future__ import annotations

import dataclasses

from absl import flags

from jaxblend.cli import data_flags, flag_help, flag_values
from jaxblend.cli.steps import StepSettings

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


def step_settings_from_flags(global_batch_size: int | None = None) -> StepSettings:
    """The `StepSettings` of the flags (`global_batch_size` in place of `--global_batch_size`)."""
    settings = StepSettings.from_values(flag_values.read_flag_values())
    if global_batch_size is not None:
        settings = dataclasses.replace(settings, global_batch_size=global_batch_size)
    return settings

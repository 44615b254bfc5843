"""`--data_schedule=PATH`: the train split's mixture over steps, read from a JSON file.

The flag is a data flag (`define_data_flags` defines it, so every tool that reads data has it);
this module reads the file (a local path, or a gs:// / s3:// object reached with the run's
`DataAccess`), and turns the schedule's steps into the sample ids of the index layer through the
step plan of the step-plan flags (`--global_batch_size`, `--rampup_batch_size`,
`--step_batch_size_schedule`) over the train split's samples. The format and the rules are in
docs/schedules.md and `jaxblend.sampling.data_schedule`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from absl import flags

from jaxblend.access import DataAccess

if TYPE_CHECKING:  # the sampling layer loads JAX: deferred to the functions that need it
    from jaxblend.index.blend_schedule import BlendSchedule
    from jaxblend.sampling import DataSchedule

FLAG = "data_schedule"


def flag_value() -> str | None:
    """`--data_schedule`, or None (also in programs that do not define it)."""
    fl = flags.FLAGS
    return (fl[FLAG].value or None) if FLAG in fl else None


def read_data_schedule(path: str, access: DataAccess | None = None) -> DataSchedule:
    """The schedule in the JSON file `path` (local, ``file://``, ``gs://`` or ``s3://``).

    Raises:
      ValueError: one line naming ``--data_schedule <path>``: the file is missing or unreadable,
        or not a valid schedule (which stage, what is wrong).
    """
    from jaxblend.sampling import DataSchedule
    from jaxblend.tokenizer_facts import read_text

    access = DataAccess.from_env() if access is None else access
    source = f"--{FLAG} {path}"
    try:
        text = read_text(path, access)
    except UnicodeDecodeError:
        raise ValueError(f"{source}: not a UTF-8 text file; expected a JSON schedule") from None
    except (ValueError, OSError, TimeoutError) as err:  # the store's failure, in one line
        raise ValueError(f"{source}: cannot read it ({' '.join(str(err).split())})") from None
    if text is None:
        raise ValueError(f"{source}: no such file; give the path or URL of the schedule's JSON")
    return DataSchedule.from_json_text(text, source)


def data_schedule_from_flags(access: DataAccess | None = None) -> DataSchedule | None:
    """The schedule of `--data_schedule`, or None without the flag.

    Args:
      access: how a bucket file is reached (default: the flags' `data_access_from_flags()`).

    Raises:
      ValueError: as `read_data_schedule`.
    """
    path = flag_value()
    if path is None:
        return None
    if access is None:
        from jaxblend.cli.access_flags import data_access_from_flags

        access = data_access_from_flags()
    return read_data_schedule(path, access)


def train_blend_schedule(schedule: DataSchedule, train_samples: int) -> BlendSchedule:
    """The schedule in samples: each stage starts at the first sample of its first step under the
    step-plan flags' plan over `train_samples` samples (the run's steps: every full step).

    Raises:
      ValueError: the program has no step-plan flags, a stage starts at or after the run's last
        step, or the index layer refuses a stage.
      app.UsageError: the step-plan flags are inconsistent.
    """
    fl = flags.FLAGS
    if "global_batch_size" not in fl:
        raise ValueError(
            f"--{FLAG} counts steps, but this program has no step-plan flags to turn them into "
            "samples"
        )
    from jaxblend.cli import step_plan_flags

    plan = step_plan_flags.step_plan(train_samples, fl.global_batch_size)
    return schedule.blend_schedule(plan)


def staged_history(config, source, access: DataAccess, schedule: DataSchedule | None = None):
    """The resume history of a staged train split (`jaxblend.loading.StagedHistory`), or None
    when `config` has no `train_schedule`.

    Args:
      config: the run's `GPTDataConfig` (None with mock data).
      source: the train source opened from `config`: its schema options and its datasets'
        fingerprints are the history's (nothing is opened again).
      access: how the schedule file is reached.
      schedule: the schedule in steps (default: `--data_schedule`, read again).
    """
    if config is None or config.train_schedule is None:
        return None
    from jaxblend.loading.resume_history import gpt_train_history

    schedule = data_schedule_from_flags(access) if schedule is None else schedule
    if schedule is None:
        raise ValueError("the configuration has a train_schedule but --data_schedule is not given")
    return gpt_train_history(schedule, config, source)

"""`--data_schedule=PATH`: the train split's mixture over steps, read from a JSON file.

The flag is a data flag (`define_data_flags` defines it, so every tool that reads data has it);
this module reads the file (a local path, or a gs:// / s3:// object reached with the run's
`DataAccess`) and gives a staged train split its resume history. The assembly
(`jaxblend.cli.assembly.assemble`) turns the schedule's steps into the sample ids of the index
layer through the run's step plan (`--global_batch_size`, `--rampup_batch_size`,
`--step_batch_size_schedule`) over the train split's samples. The format and the rules are in
docs/schedules.md and `jaxblend.sampling.data_schedule`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jaxblend.access import DataAccess

if TYPE_CHECKING:  # the sampling layer loads JAX: deferred to the functions that need it
    from jaxblend.sampling import DataSchedule

FLAG = "data_schedule"


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


def staged_history(config, source, schedule: DataSchedule | None):
    """The resume history of a staged train split (`jaxblend.loading.StagedHistory`), or None
    when `config` has no `train_schedule`.

    Args:
      config: the run's `GPTDataConfig` (None with mock data).
      source: the train source opened from `config`: its schema options and its datasets'
        fingerprints are the history's (nothing is opened again).
      schedule: the schedule in steps (`RunConfig.schedule`) that `config`'s stages come from.
    """
    if config is None or config.train_schedule is None:
        return None
    from jaxblend.loading.resume_history import gpt_train_history

    if schedule is None:
        raise ValueError("the configuration has a train_schedule but no --data_schedule is given")
    return gpt_train_history(schedule, config, source)

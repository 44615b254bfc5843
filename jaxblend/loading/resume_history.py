"""Resuming a staged train split whose FUTURE stages changed: the history a resume state checks.

A loader's resume state normally carries the identity of its whole source, so any change of the
data refuses a resume. A train split drawn by a data schedule (`--data_schedule`,
`jaxblend.sampling.DataSchedule`) may change its stages after the resume step: the samples before
it stay the same (the index layer's staged blend is prefix-stable). For such a source the state's
fingerprint is the identity of the samples BEFORE the resume step (`StagedHistory.identity`)
and the state carries the schedule in steps, so that a schedule rewriting a past step is refused
with one line naming the first changed stage (docs/schedules.md, "Edits at resume").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxblend.sampling.data_schedule import DataSchedule

STATE_KEY = "data_schedule"


@dataclasses.dataclass(frozen=True)
class StagedHistory:
    """What a loader over a staged train split checks at resume instead of the whole source.

    Attributes:
      schedule: the run's data schedule in steps (saved in the state; names a changed stage).
      identity: `identity(n)`, the identity of the source's samples [0, n): equal for two sources
        that serve them alike (same data, configuration and schema), whatever their later
        samples.
    """

    schedule: DataSchedule
    identity: Callable[[int], str]

    def saved(self) -> dict[str, Any]:
        """The state's entry: the schedule in steps."""
        return self.schedule.to_json()

    def explain_mismatch(self, state: Mapping[str, Any], step: int) -> str | None:
        """One line saying why a state's history differs from this run's, when the schedules
        say it: a stage before `step` changed, or the state has no schedule. None otherwise.
        """
        src = self.schedule.source
        saved = state.get(STATE_KEY)
        if saved is None:
            return (
                f"{src}: the checkpoint was saved by a run without a data schedule; resume it "
                "with its own data flags (a schedule cannot replace a past blend), or start a new "
                "checkpoint directory"
            )
        try:
            old = DataSchedule.from_json(saved, "the checkpoint's data schedule")
        except ValueError:
            return None
        k = self.schedule.first_change_before(old, step)
        if k is None:
            return None
        if k < len(self.schedule.cut(step)):
            what = f"{self.schedule.describe_stage(k)} differs from the checkpoint's schedule"
        else:
            what = f"the checkpoint's {old.describe_stage(k)} is missing from the schedule"
        return (
            f"{src}: {what} before the resume step {step}; past steps cannot change: restore "
            f"the checkpoint's stages up to step {step} (edit only stages that start at or after "
            f"step {step})"
        )


def explain_unscheduled(state: Mapping[str, Any], step: int) -> str | None:
    """The line for a state saved with a data schedule resumed by a loader without one."""
    if state.get(STATE_KEY) is None:
        return None
    return (
        f"the checkpoint (step {step}) was saved by a run with a data schedule "
        f"(--data_schedule): resume it with a schedule whose stages before step {step} are the "
        "checkpoint's"
    )


@dataclasses.dataclass(frozen=True)
class GPTTrainHistory:
    """The `StagedHistory.identity` of a GPT train split built from a data configuration with a
    `train_schedule`: `jaxblend.index.history_fingerprint` of the configuration and its datasets'
    contents, read with the schema options (as the source's own fingerprint is).

    Attributes:
      config: the data configuration (`GPTDataConfig`).
      options: the source's `GPTSchemaOptions`.
      fingerprints: the content fingerprints of the datasets named, by prefix, as the source
        opened them (its `dataset_fingerprints_of`: from the datasets, or from the publication's
        dataset table on a bucket map store, where only the lines of the datasets asked for are
        read). A history asks only for the datasets of the stages before its step, when a state
        is saved or checked: nothing at start.
    """

    config: Any
    options: Any
    fingerprints: Callable[[Sequence[str]], Mapping[str, str]]

    def __call__(self, num_samples: int) -> str:
        from jaxblend.index import DatasetInfo, history_fingerprint
        from jaxblend.index.data_maps import history_prefixes
        from jaxblend.sources.gpt_source import gpt_source_fingerprint

        found = self.fingerprints(history_prefixes(self.config, int(num_samples)))
        infos = {p: DatasetInfo(p, _unread, _unread, f) for p, f in found.items()}
        history = history_fingerprint(self.config, infos, int(num_samples))
        return gpt_source_fingerprint(
            history, "train-history", self.options, self.config.seq_length,
            self.config.add_extra_token_to_sequence,
        )


def _unread():
    raise ValueError("a dataset's arrays are not needed for its history fingerprint")


def gpt_train_history(schedule: DataSchedule, config: Any, source: Any) -> StagedHistory:
    """The `StagedHistory` of `source`, the train split of `config` (whose `train_schedule` is
    `schedule` in samples): its schema options and its datasets' fingerprints, looked up when
    a state is saved or checked (`source.dataset_fingerprints_of`)."""
    return StagedHistory(
        schedule, GPTTrainHistory(config, source.options, source.dataset_fingerprints_of)
    )

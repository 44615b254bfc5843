"""Data schedules: the training mixture changing over steps (`--data_schedule=sched.json`).

A data schedule is a list of stages; stage k starts at a training STEP and has its own blend
(weights over any datasets: a dataset may join or leave at a stage boundary). The last stage runs
to the end of the train split. The file format (`EXAMPLE`) is in docs/schedules.md.

The index layer works in samples, not steps (`jaxblend.index.blend_schedule.BlendSchedule`):
`DataSchedule.blend_schedule(plan)` turns each stage's first step into the first sample of that
step under the run's step plan (fixed batches, `--rampup_batch_size`,
`--step_batch_size_schedule`): the first sample of step k is the sum of the batch sizes of steps
< k. `first_change_before` compares two schedules over the steps a resumed run has already
trained (docs/schedules.md, "Edits at resume").
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from jaxblend.index import blend_spec
from jaxblend.validation import require_int

if TYPE_CHECKING:  # the index layer's staged blend; the step plans
    from jaxblend.index.blend_schedule import BlendSchedule
    from jaxblend.sampling.step_plan import StepPlan

_STAGE_KEYS = ("start_step", "blend")
EXAMPLE = '{"stages": [{"start_step": 0, "blend": ["50", "/d/a", "50", "/d/b"]}, ...]}'


@dataclasses.dataclass(frozen=True)
class DataStage:
    """One stage of a data schedule.

    Attributes:
      start_step: the first training step of the stage.
      blend: its `Blend` (``("50", "/d/a", "50", "/d/b")``, or one prefix); a blend list or a
        white-space separated string is accepted and parsed with the stages' rules
        (`blend_spec.parse_stage_blend`, the same as the index layer's `BlendStage`).
    """

    start_step: int
    blend: blend_spec.Blend

    def __post_init__(self) -> None:
        require_int("DataStage.start_step", self.start_step, 0)
        object.__setattr__(self, "start_step", int(self.start_step))
        object.__setattr__(
            self, "blend", blend_spec.parse_stage_blend(self.blend, "DataStage.blend")
        )

    def same_samples(self, other: DataStage) -> bool:
        """Whether both stages start at the same step and draw alike (same datasets, in the same
        order, with the same normalized weights: ``50 a 50 b`` equals ``1 a 1 b``)."""
        return (self.start_step, self.blend.prefixes, self.blend.normalized_weights()) == (
            other.start_step, other.blend.prefixes, other.blend.normalized_weights()
        )


@dataclasses.dataclass(frozen=True)
class DataSchedule:
    """A training mixture over steps: stages, the first at step 0, strictly increasing steps.

    Attributes:
      stages: the stages in step order.
      source: where the schedule came from (``--data_schedule sched.json``), for messages; not
        part of the schedule's identity.
    """

    stages: tuple[DataStage, ...]
    source: str = dataclasses.field(default="data schedule", compare=False)

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        object.__setattr__(self, "stages", stages)
        if not stages:
            raise ValueError(f"{self.source}: the schedule has no stages; give at least {EXAMPLE}")
        for k, stage in enumerate(stages):
            if not isinstance(stage, DataStage):
                raise ValueError(  # noqa: TRY004 - one line through the CLIs' ValueError path
                    f"{self.source}: stage {k} is a {type(stage).__name__}, not a DataStage"
                )
        if stages[0].start_step != 0:
            raise ValueError(
                f"{self.source}: {self.describe_stage(0)} must start at step 0 (the first stage "
                "covers the run's first steps)"
            )
        for k in range(1, len(stages)):
            if stages[k].start_step <= stages[k - 1].start_step:
                raise ValueError(
                    f"{self.source}: {self.describe_stage(k)} does not start after "
                    f"{self.describe_stage(k - 1)}; start steps must strictly increase"
                )

    @classmethod
    def from_json(cls, data: Any, source: str = "data schedule") -> DataSchedule:
        """The schedule of a decoded JSON document (`to_json`'s form).

        Raises:
          ValueError: one line naming `source` and the stage: not an object with "stages",
            unknown keys, a missing or non-integer start_step, a bad blend, misordered stages.
        """
        if not isinstance(data, Mapping) or set(data) != {"stages"}:
            if not isinstance(data, Mapping):
                found = f"got {type(data).__name__}"
            elif set(data) - {"stages"}:
                found = f"unknown keys {sorted(set(data) - {'stages'})}"
            else:
                found = "no \"stages\" entry"
            raise ValueError(
                f"{source}: expected an object with only \"stages\" ({found}), e.g. {EXAMPLE}"
            )
        raw = data["stages"]
        if not isinstance(raw, list) or not raw:
            raise ValueError(f"{source}: \"stages\" must be a non-empty list, e.g. {EXAMPLE}")
        stages = []
        for k, entry in enumerate(raw):
            where = f"{source}: stage {k}"
            if not isinstance(entry, Mapping):
                raise ValueError(  # noqa: TRY004 - a bad file, not a programming error
                    f"{where} is a {type(entry).__name__}, not an object "
                    "{\"start_step\", \"blend\"}"
                )
            unknown = sorted(set(entry) - set(_STAGE_KEYS))
            if unknown:
                raise ValueError(f"{where}: unknown keys {unknown} (a stage has {list(_STAGE_KEYS)})")
            missing = [key for key in _STAGE_KEYS if key not in entry]
            if missing:
                raise ValueError(f"{where}: missing {missing}")
            step = entry["start_step"]
            require_int(f"{where}: start_step", step, 0)
            where = f"{source}: stage {k} (start_step {step})"
            stages.append(DataStage(step, _blend_of_json(entry["blend"], where)))
        return cls(tuple(stages), source)

    @classmethod
    def from_json_text(cls, text: str, source: str) -> DataSchedule:
        """The schedule of a JSON file's text.

        Args:
          text: the file's contents.
          source: how messages name it (``--data_schedule gs://b/sched.json``).

        Raises:
          ValueError: one line naming `source` (and the stage): not JSON, or as `from_json`.
        """
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ValueError(f"{source}: not JSON ({err}); expected {EXAMPLE}") from None
        return cls.from_json(data, source)

    def to_json(self) -> dict[str, Any]:
        """``{"stages": [{"start_step": ..., "blend": [...]}, ...]}`` (`from_json` reads it)."""
        return {
            "stages": [
                {"start_step": s.start_step, "blend": list(s.blend)} for s in self.stages
            ]
        }

    def prefixes(self) -> list[str]:
        """Every dataset of the schedule, in order of first appearance."""
        return blend_spec.blend_prefixes([s.blend for s in self.stages])

    def stage_of(self, step: int) -> int:
        """The index of the stage that `step` belongs to."""
        return max(0, bisect.bisect_right([s.start_step for s in self.stages], step) - 1)

    def cut(self, step: int) -> tuple[DataStage, ...]:
        """The stages that start before `step` (what steps [0, step) are drawn from)."""
        return tuple(s for s in self.stages if s.start_step < step)

    def first_change_before(self, other: DataSchedule, step: int) -> int | None:
        """The index of the first stage that differs when both schedules are cut to [0, step).

        Two stages agree when they start at the same step and draw alike (`DataStage.same_samples`).
        A stage present in one cut and absent from the other differs.

        Returns:
          The index (in this schedule's numbering where it has the stage, else in `other`'s), or
          None when both give the same stages for steps [0, step).
        """
        mine, theirs = self.cut(step), other.cut(step)
        for k in range(max(len(mine), len(theirs))):
            if k >= len(mine) or k >= len(theirs) or not mine[k].same_samples(theirs[k]):
                return k
        return None

    def describe_stage(self, index: int) -> str:
        """``stage 1 (start_step 100)``."""
        return f"stage {index} (start_step {self.stages[index].start_step})"

    def start_samples(self, plan: StepPlan) -> list[int]:
        """The first sample id of each stage's first step under `plan`.

        Raises:
          ValueError: a stage starts at or after the plan's last step (it would never train), or
            the plan's steps are not consecutive runs of samples (token-budget plans).
        """
        for k, stage in enumerate(self.stages):
            if stage.start_step >= plan.num_steps:
                raise ValueError(
                    f"{self.source}: {self.describe_stage(k)} starts at or after the end of the "
                    f"run ({plan.num_steps} steps, last step {plan.num_steps - 1}); it would "
                    "never train: drop it, or train longer (--train_iters / --train_samples)"
                )
        return [first_sample(plan, s.start_step) for s in self.stages]

    def blend_schedule(self, plan: StepPlan) -> BlendSchedule:
        """The index layer's staged blend: each stage starting at its first step's first sample.

        Args:
          plan: the run's step plan (its `num_steps` the run's steps).

        Raises:
          ValueError: as `start_samples`, or a stage the index layer refuses.
        """
        from jaxblend.index.blend_schedule import BlendSchedule, BlendStage

        starts = self.start_samples(plan)
        try:
            return BlendSchedule(tuple(
                BlendStage(start, s.blend) for start, s in zip(starts, self.stages, strict=True)
            ))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{self.source}: {err}") from None


def _blend_of_json(value: Any, where: str) -> blend_spec.Blend:
    """A stage's ``blend`` entry (a list of strings and numbers, or one string) as a `Blend`."""
    items = value.split() if isinstance(value, str) else value  # numbers: weights, as str(v)
    if not isinstance(items, list) or not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in items
    ):
        raise ValueError(
            f"{where}: blend must be a list of weights and prefixes (e.g. [\"50\", \"/d/a\", "
            f"\"50\", \"/d/b\"]) or one prefix, got {value!r}"
        )
    if not items:
        raise ValueError(f"{where}: blend is empty; give weight, prefix pairs or one prefix")
    return blend_spec.parse_stage_blend(items, where)


def first_sample(plan: StepPlan, step: int) -> int:
    """The first global sample id of `step` under `plan`: the sum of the batch sizes of the steps
    before it (any step >= 0, also the plan's end).

    Raises:
      ValueError: the plan's steps are not consecutive runs of samples (token-budget plans).
    """
    first = getattr(plan, "first_sample", None)
    if first is None:
        raise ValueError(
            f"a data schedule needs a step plan whose step k starts at the sum of the earlier "
            f"batch sizes (fixed batches, --rampup_batch_size, --step_batch_size_schedule), not "
            f"{type(plan).__name__}"
        )
    return int(first(step))

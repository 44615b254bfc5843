"""Megatron-Core's step batch-size schedule (`--step-batch-size-schedule "0:768 250B:1536"`).

Megatron-Core 0.18 replaced `--rampup-batch-size` with a list of `THRESHOLD:BATCH_SIZE` entries:
before each step the batch size is that of the last entry whose threshold is <= the samples
consumed, and step k holds samples `[consumed_k, consumed_k + B_k)`, as megatron-core's
`StepBatchsizeNumMicroBatchesCalculator` applies them. The rules (suffixes, numbers read as
Megatron reads them, token thresholds, the checks, skipped entries; no
`decrease_batch_size_if_needed`) are in docs/megatron_migration.md, "Step batch-size schedule".
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math

from jaxblend import identity
from jaxblend.sampling.step_plan import SegmentedStepPlan
from jaxblend.validation import require_int

FLAG = "--step_batch_size_schedule"
EXAMPLE = "'0:768 250B:1536 500B:3072'"
_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_LARGEST = 2**53  # beyond any corpus; keeps the step arithmetic inside int64


def _number(text: str) -> int:
    """One number of an entry, with its optional suffix (K, M, B, T), as Megatron reads it:
    `int(float(digits) * multiplier)`, so a decimal binary floating point cannot hold truncates.

    Raises:
      ValueError: if it is not a finite number.
    """
    digits = text.strip().upper()
    multiplier = _SUFFIXES.get(digits[-1:], 1)
    if multiplier != 1:
        digits = digits[:-1]
    try:
        value = float(digits) * multiplier
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a number with an optional K, M, B or T suffix")
    return int(value)


def _problem(thresholds: tuple[int, ...], batch_sizes: tuple[int, ...]) -> str | None:
    """What is wrong with a schedule (sample thresholds in order), or None."""
    if not thresholds:
        return f"the schedule needs at least one THRESHOLD:BATCH_SIZE entry, e.g. {EXAMPLE}"
    if len(thresholds) != len(batch_sizes):
        return f"{len(thresholds)} thresholds but {len(batch_sizes)} batch sizes"
    if thresholds[0] != 0:
        return f"the schedule must start at threshold 0, but its first threshold is sample {thresholds[0]}"
    for before, after in itertools.pairwise(thresholds):
        if after <= before:
            return f"thresholds must be strictly increasing, got sample {before} then {after}"
    for size in batch_sizes:
        if size < 1:
            return f"every batch size must be >= 1, got {size}"
    if max(*thresholds, *batch_sizes) >= _LARGEST:
        return f"thresholds and batch sizes must be below 2**53, got {max(*thresholds, *batch_sizes)}"
    return None


@dataclasses.dataclass(frozen=True)
class StepBatchSchedule:
    """A step batch-size schedule with thresholds in samples.

    Build from Megatron's text with `StepBatchSchedule.from_megatron`.

    Attributes:
      thresholds: samples consumed at which each entry begins: 0 first, strictly increasing.
      batch_sizes: the global batch size of each entry (>= 1).
    """

    thresholds: tuple[int, ...]
    batch_sizes: tuple[int, ...]

    def __post_init__(self):
        for name in ("thresholds", "batch_sizes"):
            values = tuple(getattr(self, name))
            for value in values:
                require_int(f"StepBatchSchedule.{name}[]", value, 0)
            object.__setattr__(self, name, tuple(int(v) for v in values))
        if problem := _problem(self.thresholds, self.batch_sizes):
            raise ValueError(f"StepBatchSchedule: {problem}")

    @classmethod
    def from_megatron(cls, text: str, seq_length: int | None = None) -> StepBatchSchedule:
        """Parses Megatron's `--step-batch-size-schedule` value.

        Args:
          text: `"THRESHOLD:BATCH_SIZE ..."`, entries separated by spaces or commas.
          seq_length: tokens per sample: thresholds are tokens, converted to samples by integer
            division. None: thresholds are samples.

        Raises:
          ValueError: one line naming `--step_batch_size_schedule`, the value and the problem.
        """
        if seq_length is not None:
            require_int(f"{FLAG} sequence length", seq_length, 1)
        unit = "samples" if seq_length is None else f"tokens of seq_length {seq_length}"
        entries = []
        for entry in text.replace(",", " ").split():
            threshold, colon, size = entry.partition(":")
            try:
                if not colon:
                    raise ValueError(f"entry {entry!r} is not THRESHOLD:BATCH_SIZE")
                entries.append((_number(threshold) // (seq_length or 1), _number(size)))
            except ValueError as err:
                raise ValueError(f"{FLAG}={text!r}: {err} (thresholds in {unit}, e.g. {EXAMPLE})") from None
        entries.sort(key=lambda e: e[0])  # Megatron orders the entries by threshold
        thresholds, batch_sizes = zip(*entries) if entries else ((), ())
        if problem := _problem(thresholds, batch_sizes):
            raise ValueError(f"{FLAG}={text!r}: {problem} (thresholds in {unit})")
        return cls(thresholds, batch_sizes)

    @property
    def global_batch_size(self) -> int:
        """The batch size of the last entry (the size the run ends at)."""
        return self.batch_sizes[-1]

    def batch_size_at(self, consumed: int) -> int:
        """The batch size of a step that begins after `consumed` samples (Megatron's lookup)."""
        require_int("consumed samples", consumed, 0)
        return self.batch_sizes[bisect.bisect_right(self.thresholds, consumed) - 1]

    def __str__(self) -> str:
        """The schedule in Megatron's spelling, thresholds in samples."""
        return " ".join(f"{t}:{b}" for t, b in zip(self.thresholds, self.batch_sizes))


@dataclasses.dataclass(frozen=True)
class StepBatchSchedulePlan(SegmentedStepPlan):
    """Global batches following a step batch-size schedule, in Megatron's order.

    Step k holds samples `[consumed_k, consumed_k + B_k)` with `B_k` the schedule's size at
    `consumed_k`; the plan stores one run of equal-sized steps per entry reached.

    Attributes:
      schedule: the schedule (`StepBatchSchedule.from_megatron("0:8 1K:16", seq_length)`).
      num_steps: steps in the plan.
    """

    schedule: StepBatchSchedule
    num_steps: int
    _segments: tuple = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.schedule, StepBatchSchedule):
            raise TypeError(
                f"StepBatchSchedulePlan.schedule must be a StepBatchSchedule, got {self.schedule!r}"
            )
        require_int("StepBatchSchedulePlan.num_steps", self.num_steps, 0)
        self._set_segments(self._runs())

    def _runs(self) -> list[tuple[int, int, int]]:
        """(first step, first sample, batch size) of each entry the steps reach."""
        s = self.schedule
        runs = []
        step = consumed = entry = 0
        while entry + 1 < len(s.thresholds):
            size = s.batch_sizes[entry]
            # Steps of this size until the consumed samples reach the next threshold.
            count = -(-(s.thresholds[entry + 1] - consumed) // size)
            runs.append((step, consumed, size))
            step += count
            consumed += count * size
            entry = bisect.bisect_right(s.thresholds, consumed) - 1
        runs.append((step, consumed, s.batch_sizes[entry]))
        return runs

    @classmethod
    def covering(
        cls, num_samples: int, schedule: StepBatchSchedule, num_steps: int | None = None
    ) -> StepBatchSchedulePlan:
        """The plan over a source of `num_samples` samples: `num_steps` steps or all that fit.

        Raises:
          ValueError: if `num_steps` steps need more samples than there are.
        """
        unbounded = cls(schedule, 0)
        return unbounded._covering(num_samples, num_steps, f" with {FLAG}='{schedule}'")

    @property
    def schedule_steps(self) -> int:
        """The step at which the last entry's batch size begins (it holds every later step)."""
        return int(self._segments[0][-1])

    @property
    def fingerprint(self) -> str:
        return identity.fingerprint(
            "step_batch_schedule_plan", 1,
            thresholds=self.schedule.thresholds, batch_sizes=self.schedule.batch_sizes,
        )

"""Step plans whose batch size changes with the samples consumed: runs of equal-sized steps.

Megatron-LM's batch-size schedules (`--rampup-batch-size`, `--step-batch-size-schedule`) pick
each step's global batch size from the samples consumed before it, and step k holds the next
`B_k` samples: `[consumed_k, consumed_k + B_k)`. Such a plan is a few runs ("segments") of
consecutive steps of one size; the last run never ends. `StepSegments` stores them, and
`SegmentedStepPlan` answers the `StepPlan` questions from them, so a plan of millions of steps
costs a few arrays of schedule length. `RampupStepPlan` and `StepBatchSchedulePlan` differ only in
how they compute the segments.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable

import numpy as np

from jaxblend.sampling.step_plan import BatchShape, check_from_step, check_step


@dataclasses.dataclass(frozen=True, eq=False)
class StepSegments:
    """Runs of equal-sized steps; run i starts at step `steps[i]` with sample `firsts[i]`.

    Build with `StepSegments.of`. Runs are in step order; the last one holds every later step.

    Attributes:
      steps: int64, first step of each run (the first is 0, strictly increasing).
      firsts: int64, samples consumed before that step (the first is 0, strictly increasing).
      sizes: int64, the batch size of every step of the run (>= 1).
    """

    steps: np.ndarray
    firsts: np.ndarray
    sizes: np.ndarray

    @classmethod
    def of(cls, runs: Iterable[tuple[int, int, int]]) -> StepSegments:
        """Segments from `(first step, first sample, batch size)` triples in step order.

        Raises:
          ValueError: if the runs are empty, do not start at step 0 / sample 0, or a run's steps
            and samples do not follow from the previous run's size.
        """
        rows = list(runs)
        if not rows or rows[0][:2] != (0, 0):
            raise ValueError(f"step segments must start at step 0, sample 0, got {rows[:1]}")
        for (step, first, size), (next_step, next_first, _) in itertools.pairwise(rows):
            if next_step <= step or next_first != first + (next_step - step) * size:
                raise ValueError(f"step segment {(next_step, next_first)} does not follow "
                                 f"{(step, first, size)}")
        steps, firsts, sizes = (np.array(column, np.int64) for column in zip(*rows))
        if sizes.min() < 1:
            raise ValueError(f"step segment sizes must be >= 1, got {sizes.tolist()}")
        return cls(steps, firsts, sizes)

    def _index(self, step: int) -> int:
        return int(np.searchsorted(self.steps, step, side="right")) - 1

    @property
    def last_start(self) -> int:
        """The step at which the last (endless) run begins."""
        return int(self.steps[-1])

    def first_sample(self, step: int) -> int:
        """Samples consumed before `step` (Megatron's `consumed_samples`); any step >= 0.

        Raises:
          IndexError: if `step` is negative.
        """
        if step < 0:
            raise IndexError(f"step {step} must be >= 0")
        i = self._index(step)
        return int(self.firsts[i] + (step - self.steps[i]) * self.sizes[i])

    def batch_size(self, step: int) -> int:
        """The batch size of `step` (any step >= 0)."""
        return int(self.sizes[self._index(step)])

    def steps_within(self, num_samples: int) -> int:
        """How many whole steps `num_samples` samples hold."""
        i = int(np.searchsorted(self.firsts, num_samples, side="right")) - 1
        return int(self.steps[i] + (num_samples - self.firsts[i]) // self.sizes[i])

    def sizes_between(self, start: int, stop: int) -> frozenset[int]:
        """The distinct batch sizes of steps `[start, stop)` (empty if `stop <= start`).

        Run i holds steps `[steps[i], steps[i + 1])` (the last run every later step); a run
        counts if it shares a step with the range. Costs one pass over the runs.
        """
        if stop <= start:
            return frozenset()
        ends = np.append(self.steps[1:], np.iinfo(np.int64).max)
        used = (self.steps < stop) & (ends > start)
        return frozenset(int(s) for s in np.unique(self.sizes[used]))


class SegmentedStepPlan:
    """The `StepPlan` answers of a plan given by `StepSegments`.

    Subclasses are frozen dataclasses with a `num_steps` field and a `_segments` field
    (`StepSegments`) set in `__post_init__`; they add the fingerprint.
    """

    num_steps: int
    _segments: StepSegments

    def first_sample(self, step: int) -> int:
        """Samples consumed before `step` (Megatron's `consumed_samples`); any step >= 0."""
        return self._segments.first_sample(step)

    def steps_within(self, num_samples: int) -> int:
        """How many whole steps `num_samples` samples hold."""
        return self._segments.steps_within(num_samples)

    @property
    def num_samples(self) -> int:
        return self.first_sample(self.num_steps)

    def batch_size(self, step: int) -> int:
        return self._segments.batch_size(check_step(step, self.num_steps))

    def sample_ids(self, step: int) -> np.ndarray:
        first = np.int64(self.first_sample(check_step(step, self.num_steps)))
        return first + np.arange(self.batch_size(step), dtype=np.int64)

    def padded_length(self, step: int) -> int | None:
        check_step(step, self.num_steps)
        return None

    def batch_shapes(self, from_step: int = 0) -> frozenset[BatchShape]:
        start = check_from_step(from_step, self.num_steps)
        return frozenset(
            BatchShape(size, None) for size in self._segments.sizes_between(start, self.num_steps)
        )


def plan_covering(
    unbounded: SegmentedStepPlan, num_samples: int, num_steps: int | None, described: str
) -> SegmentedStepPlan:
    """`unbounded` over `num_samples` samples: with `num_steps` steps, or (None) all that fit.

    Args:
      unbounded: the plan (any `num_steps`), for its segments.
      num_samples: samples of the source.
      num_steps: steps wanted, or None.
      described: how the error names the schedule, e.g. `"--rampup_batch_size='32 32 1000'"`.

    Raises:
      ValueError: if `num_steps` steps need more samples than there are.
    """
    available = unbounded.steps_within(num_samples)
    if num_steps is not None and num_steps > available:
        raise ValueError(
            f"num_steps={num_steps} with {described} needs {unbounded.first_sample(num_steps)} "
            f"samples but the source has {num_samples} ({available} steps)"
        )
    return dataclasses.replace(unbounded, num_steps=available if num_steps is None else num_steps)

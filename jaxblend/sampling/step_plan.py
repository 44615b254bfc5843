"""The step plan: which global samples make step k, and the batch shapes a run can see.

A step plan is the one answer to "which samples form global batch k" (docs/design.md, "Global
batch k"). It is pure and picklable: every host computes the same plan from the same
configuration, without exchanging anything, and a run resumes from a step number alone. Which of
a batch's rows a process loads is decided separately, from the batch sharding
(`jaxblend.sampling.process_rows`).

Variants: `FixedStepPlan` (B samples per step), `RampupStepPlan` (Megatron-LM's
`--rampup-batch-size`) and `StepBatchSchedulePlan` (its `--step-batch-size-schedule`), all
`SegmentedStepPlan`s, and `TokenBudgetPlan` (token-budget batches of variable-length samples).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Protocol

import numpy as np

from jaxblend import identity
from jaxblend.validation import require_int


class BatchShape(NamedTuple):
    """One batch shape a plan produces (XLA compiles one program per shape).

    Attributes:
      rows: the global batch size.
      length: padded sequence length of bucketed batches; None where the source's own length
        applies (fixed-length samples).
    """

    rows: int
    length: int | None


class StepPlan(Protocol):
    """What every step plan answers. Implementations are pure, frozen and picklable."""

    @property
    def num_steps(self) -> int:
        """Steps in the plan (step k for k in [0, num_steps))."""

    @property
    def num_samples(self) -> int:
        """Sample ids the plan draws from are below this: the source must hold as many."""

    @property
    def fingerprint(self) -> str:
        """Identity of the plan (what a resume state must match); excludes `num_steps`."""

    def batch_size(self, step: int) -> int:
        """Global batch size of `step`."""

    def sample_ids(self, step: int) -> np.ndarray:
        """int64[batch_size(step)]: the global sample id of each row of `step` (-1: padding)."""

    def padded_length(self, step: int) -> int | None:
        """Sequence length the rows of `step` are padded to; None for fixed-length samples."""

    def batch_shapes(self, from_step: int = 0) -> frozenset[BatchShape]:
        """Every distinct batch shape of steps `[from_step, num_steps)`, known before they run.

        A loader that starts (or resumes) at step k asks for `batch_shapes(k)`: the shapes it
        will still compile and split over the mesh, not those of steps already trained.

        Raises:
          IndexError: if `from_step` is not in [0, num_steps].
        """


def check_from_step(from_step: int, num_steps: int) -> int:
    """`from_step` as an int if it is in [0, num_steps] (num_steps: no step left).

    Raises:
      IndexError: naming the step and the range.
    """
    if isinstance(from_step, bool) or not 0 <= from_step <= num_steps:
        raise IndexError(f"from_step {from_step} out of range [0, {num_steps}]")
    return int(from_step)


def check_step(step: int, num_steps: int) -> int:
    """`step` as an int if it is in [0, num_steps).

    Raises:
      IndexError: naming the step and the range.
    """
    if not 0 <= step < num_steps:
        raise IndexError(f"step {step} out of range [0, {num_steps})")
    return int(step)


class SegmentedStepPlan:
    """The `StepPlan` answers of a plan whose step k holds the next `B_k` samples,
    `[first_sample(k), first_sample(k) + B_k)`, with `B_k` constant over runs of consecutive steps.

    Megatron-LM's batch-size schedules (`--rampup-batch-size`, `--step-batch-size-schedule`) pick
    each step's global batch size from the samples consumed before it; a fixed batch size is one
    run. The plan stores a few runs ("segments") of equal-sized steps, the last never ending, so a
    plan of millions of steps costs a few arrays of schedule length. Subclasses are frozen
    dataclasses with a `num_steps` field and a `_segments` field (init=False) set by
    `_set_segments` in `__post_init__`; they add the fingerprint.
    """

    num_steps: int
    _segments: tuple[np.ndarray, np.ndarray, np.ndarray]  # int64 first step, first sample, size

    def _set_segments(self, runs: list[tuple[int, int, int]]) -> None:
        """Stores `(first step, first sample, batch size)` of each run, in step order (the first
        run starts at step 0, sample 0)."""
        object.__setattr__(self, "_segments", tuple(np.array(c, np.int64) for c in zip(*runs)))

    def _check(self, step: int) -> int:
        """`step` as an int if it is a step of the plan, else IndexError."""
        return check_step(step, self.num_steps)

    def _run(self, step: int) -> int:
        return int(np.searchsorted(self._segments[0], step, side="right")) - 1

    def first_sample(self, step: int) -> int:
        """Samples consumed before `step` (Megatron's `consumed_samples`); any step >= 0.

        Raises:
          IndexError: if `step` is negative.
        """
        if step < 0:
            raise IndexError(f"step {step} must be >= 0")
        steps, firsts, sizes = self._segments
        i = self._run(step)
        return int(firsts[i] + (step - steps[i]) * sizes[i])

    def steps_within(self, num_samples: int) -> int:
        """How many whole steps `num_samples` samples hold."""
        steps, firsts, sizes = self._segments
        i = int(np.searchsorted(firsts, num_samples, side="right")) - 1
        return int(steps[i] + (num_samples - firsts[i]) // sizes[i])

    @property
    def num_samples(self) -> int:
        return self.first_sample(self.num_steps)

    def batch_size(self, step: int) -> int:
        return int(self._segments[2][self._run(self._check(step))])

    def sample_ids(self, step: int) -> np.ndarray:
        first = np.int64(self.first_sample(self._check(step)))
        return first + np.arange(self.batch_size(step), dtype=np.int64)

    def padded_length(self, step: int) -> int | None:
        self._check(step)
        return None

    def batch_shapes(self, from_step: int = 0) -> frozenset[BatchShape]:
        # Run i holds steps [steps[i], steps[i + 1]) (the last every later step); it counts if it
        # shares a step with [from_step, num_steps).
        start = check_from_step(from_step, self.num_steps)
        steps, _, sizes = self._segments
        ends = np.append(steps[1:], np.iinfo(np.int64).max)
        used = (steps < self.num_steps) & (ends > start) & (start < self.num_steps)
        return frozenset(BatchShape(int(s), None) for s in np.unique(sizes[used]))

    def _covering(self, num_samples: int, num_steps: int | None, described: str = ""):
        """This plan (any `num_steps`) over `num_samples` samples: with `num_steps` steps, or
        (None) all that fit.

        Args:
          described: how the error names the schedule, e.g.
            `" with --rampup_batch_size='32 32 1000'"`.

        Raises:
          ValueError: if `num_steps` steps need more samples than there are.
        """
        available = self.steps_within(num_samples)
        if num_steps is not None and num_steps > available:
            raise ValueError(
                f"num_steps={num_steps}{described} needs {self.first_sample(num_steps)} samples "
                f"but the source has {num_samples} ({available} steps)"
            )
        return dataclasses.replace(self, num_steps=available if num_steps is None else num_steps)


@dataclasses.dataclass(frozen=True)
class FixedStepPlan(SegmentedStepPlan):
    """Step k holds samples `[k * B, (k + 1) * B)`, row r holding sample `k * B + r`.

    Attributes:
      global_batch_size: B.
      num_steps: steps in the plan.
    """

    global_batch_size: int
    num_steps: int
    _segments: tuple = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        require_int("FixedStepPlan.global_batch_size", self.global_batch_size, 1)
        require_int("FixedStepPlan.num_steps", self.num_steps, 0)
        self._set_segments([(0, 0, self.global_batch_size)])

    @classmethod
    def covering(
        cls, num_samples: int, global_batch_size: int, num_steps: int | None = None
    ) -> FixedStepPlan:
        """The plan over a source of `num_samples` samples: `num_steps` steps, or every full batch.

        Raises:
          ValueError: if `num_steps` batches need more samples than there are.
        """
        return cls(global_batch_size, 0)._covering(num_samples, num_steps)

    @property
    def fingerprint(self) -> str:
        return identity.fingerprint("fixed_step_plan", 1, global_batch_size=self.global_batch_size)

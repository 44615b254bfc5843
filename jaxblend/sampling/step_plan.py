"""The step plan: which global samples make step k, and the batch shapes a run can see.

A step plan is the one answer to "which samples form global batch k" (docs/design.md, "Global
batch k"). It is pure and picklable: every host computes the same plan from the same
configuration, without exchanging anything, and a run resumes from a step number alone. Which of
a batch's rows a process loads is decided separately, from the batch sharding
(`jaxblend.sampling.process_rows`).

Variants: `FixedStepPlan` (B samples per step), `RampupStepPlan` (Megatron-LM's
`--rampup-batch-size`) and `TokenBudgetPlan` (token-budget batches of variable-length samples).
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


@dataclasses.dataclass(frozen=True)
class FixedStepPlan:
    """Step k holds samples `[k * B, (k + 1) * B)`, row r holding sample `k * B + r`.

    Attributes:
      global_batch_size: B.
      num_steps: steps in the plan.
    """

    global_batch_size: int
    num_steps: int

    def __post_init__(self):
        require_int("FixedStepPlan.global_batch_size", self.global_batch_size, 1)
        require_int("FixedStepPlan.num_steps", self.num_steps, 0)

    @classmethod
    def covering(
        cls, num_samples: int, global_batch_size: int, num_steps: int | None = None
    ) -> FixedStepPlan:
        """The plan over a source of `num_samples` samples: `num_steps` steps, or every full batch.

        Raises:
          ValueError: if `num_steps` batches need more samples than there are.
        """
        require_int("FixedStepPlan.global_batch_size", global_batch_size, 1)
        available = num_samples // global_batch_size
        if num_steps is not None and num_steps > available:
            raise ValueError(
                f"num_steps={num_steps} needs {num_steps * global_batch_size} samples but the "
                f"source has {num_samples} ({available} full batches of {global_batch_size})"
            )
        return cls(global_batch_size, available if num_steps is None else num_steps)

    @property
    def num_samples(self) -> int:
        return self.num_steps * self.global_batch_size

    @property
    def fingerprint(self) -> str:
        return identity.fingerprint("fixed_step_plan", 1, global_batch_size=self.global_batch_size)

    def batch_size(self, step: int) -> int:
        check_step(step, self.num_steps)
        return self.global_batch_size

    def sample_ids(self, step: int) -> np.ndarray:
        first = np.int64(check_step(step, self.num_steps)) * np.int64(self.global_batch_size)
        return first + np.arange(self.global_batch_size, dtype=np.int64)

    def padded_length(self, step: int) -> int | None:
        check_step(step, self.num_steps)
        return None

    def batch_shapes(self, from_step: int = 0) -> frozenset[BatchShape]:
        if check_from_step(from_step, self.num_steps) == self.num_steps:
            return frozenset()
        return frozenset({BatchShape(self.global_batch_size, None)})

"""TokenBudgetPlan: the step plan of token-budget batches (computed by `plan_token_budget`)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from jaxblend.sampling.step_plan import BatchShape, check_from_step, check_step

PLAN_VERSION = 1


@dataclasses.dataclass(frozen=True, eq=False)
class TokenBudgetPlan:
    """Planned batches: step k has bucket `step_bucket[k]` and samples
    `row_ids[step_offsets[k]:step_offsets[k + 1]]` (`bucket_rows[step_bucket[k]]` of them, -1 =
    empty row), padded to `bucket_lengths[step_bucket[k]]` tokens. A `StepPlan`.

    Attributes:
      step_bucket: int32[steps].
      step_offsets: int64[steps + 1].
      row_ids: int64[total rows]: the sample id of every planned row, step after step.
      bucket_lengths: int32[buckets] padded length per bucket.
      bucket_rows: int32[buckets] rows per batch of each bucket.
      fingerprint: identity of the plan (config + lengths).
    """

    step_bucket: np.ndarray
    step_offsets: np.ndarray
    row_ids: np.ndarray
    bucket_lengths: np.ndarray
    bucket_rows: np.ndarray
    fingerprint: str

    def __len__(self) -> int:
        return int(self.step_bucket.shape[0])

    @property
    def num_steps(self) -> int:
        """Number of planned batches."""
        return len(self)

    @functools.cached_property
    def num_samples(self) -> int:
        """One more than the largest planned sample id."""
        real = np.asarray(self.row_ids)
        return int(real.max()) + 1 if real.size else 0

    def bucket(self, step: int) -> int:
        """The bucket of batch `step`."""
        return int(self.step_bucket[check_step(step, len(self))])

    def batch_size(self, step: int) -> int:
        return int(self.bucket_rows[self.bucket(step)])

    def sample_ids(self, step: int) -> np.ndarray:
        check_step(step, len(self))
        lo, hi = int(self.step_offsets[step]), int(self.step_offsets[step + 1])
        return np.array(self.row_ids[lo:hi], dtype=np.int64)

    def padded_length(self, step: int) -> int | None:
        return int(self.bucket_lengths[self.bucket(step)])

    def batch_shapes(self, from_step: int = 0) -> frozenset[BatchShape]:
        start = check_from_step(from_step, len(self))
        used = np.unique(np.asarray(self.step_bucket[start:]))
        return frozenset(
            BatchShape(int(self.bucket_rows[b]), int(self.bucket_lengths[b])) for b in used
        )

    def __post_init__(self) -> None:
        """Checks the arrays agree with each other.

        Raises:
          ValueError: naming the inconsistent array.
        """
        steps = self.step_bucket.shape[0]
        nb = self.bucket_lengths.shape[0]
        if self.step_offsets.shape != (steps + 1,):
            raise ValueError(
                f"bucket plan: step_offsets has shape {self.step_offsets.shape}, expected ({steps + 1},)"
            )
        if self.bucket_rows.shape != (nb,):
            raise ValueError(
                f"bucket plan: bucket_rows has shape {self.bucket_rows.shape}, expected ({nb},)"
            )
        if steps == 0:
            return
        if int(self.step_offsets[0]) != 0 or int(self.step_offsets[-1]) != self.row_ids.shape[0]:
            raise ValueError("bucket plan: step_offsets must start at 0 and end at len(row_ids)")
        b = np.asarray(self.step_bucket)
        if b.min() < 0 or b.max() >= nb:
            raise ValueError(f"bucket plan: step_bucket values must be in [0, {nb})")
        if not np.array_equal(np.diff(self.step_offsets), np.asarray(self.bucket_rows)[b]):
            raise ValueError(
                "bucket plan: rows per step disagree with bucket_rows of the step's bucket"
            )

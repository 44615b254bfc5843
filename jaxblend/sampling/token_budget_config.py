"""The rules of token-budget batching (docs/design.md, "Token-budget batching")."""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxblend.validation import require_choice, require_int

OVER_LENGTH = ("skip", "truncate")
LEFTOVER = ("drop", "pad")


@dataclasses.dataclass(frozen=True)
class TokenBudgetConfig:
    """How samples are grouped into token-budget batches.

    A sample of length L goes to bucket `b = (L - 1) // bucket_width`, whose padded length is
    `U_b = min((b + 1) * bucket_width, max_length)`; its batches have
    `R_b = floor(token_budget / U_b)` rows rounded down to a multiple of `row_multiple`, so every
    batch of a bucket is `[R_b, U_b]` and `R_b * U_b <= token_budget`.

    Attributes:
      bucket_width: w, length range of one bucket (>= 1).
      max_length: l, longest sample kept (>= 1); the last bucket's upper length.
      token_budget: most tokens (rows x padded length) of one global batch (>= max_length).
      over_length: "skip" samples longer than max_length, or "truncate" them to it.
      row_multiple: every batch's row count is a multiple of this (the data-shard count).
      leftover: after the last epoch, "drop" partially filled buckets or "pad" them to full
        batches with empty rows (sample id -1).
      seed: order of the samples: None = index order; else a permutation per epoch from
        `np.random.default_rng([seed, epoch])`.
      num_epochs: passes over the samples (buckets carry over between passes).
    """

    bucket_width: int
    max_length: int
    token_budget: int
    over_length: str = "skip"
    row_multiple: int = 1
    leftover: str = "drop"
    seed: int | None = None
    num_epochs: int = 1

    def __post_init__(self):
        for name in ("bucket_width", "max_length", "token_budget", "row_multiple", "num_epochs"):
            require_int(f"TokenBudgetConfig.{name}", getattr(self, name), 1)
        require_choice("TokenBudgetConfig.over_length", self.over_length, OVER_LENGTH)
        require_choice("TokenBudgetConfig.leftover", self.leftover, LEFTOVER)
        if self.seed is not None:
            require_int("TokenBudgetConfig.seed", self.seed, 0)
        smallest = self.row_multiple * self.max_length
        if self.token_budget < smallest:
            raise ValueError(
                f"TokenBudgetConfig.token_budget={self.token_budget} must be >= row_multiple x max_length "
                f"= {self.row_multiple} x {self.max_length} = {smallest} (the longest bucket needs "
                "at least row_multiple rows)"
            )

    @property
    def num_buckets(self) -> int:
        """Number of buckets, `ceil(max_length / bucket_width)`."""
        return -(-self.max_length // self.bucket_width)

    def bucket_lengths(self) -> np.ndarray:
        """int32[num_buckets]: each bucket's padded (upper) length."""
        upper = (np.arange(self.num_buckets, dtype=np.int64) + 1) * self.bucket_width
        return np.minimum(upper, self.max_length).astype(np.int32)

    def bucket_rows(self) -> np.ndarray:
        """int32[num_buckets]: rows of each bucket's batches (multiple of row_multiple)."""
        rows = self.token_budget // self.bucket_lengths().astype(np.int64)
        return (rows // self.row_multiple * self.row_multiple).astype(np.int32)

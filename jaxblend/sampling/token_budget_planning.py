"""plan_token_budget: the token-budget batch plan, computed once from the samples' lengths.

See docs/design.md, "Token-budget batching". The plan is a pure function of the lengths and the
`TokenBudgetConfig`, in an order fixed by the seed, so it is the same on every host and a run resumes
from a step number; no host reads data to decide batches. Visiting samples in order, bucket b
emits a batch as soon as it holds `R_b` samples (one more would exceed the budget at `U_b`);
batches are numbered by emission. At the end of an epoch the buckets keep their partial contents
into the next epoch; after the last epoch they are dropped (`leftover="drop"`) or emitted as
full-shape batches whose missing rows are empty (`leftover="pad"`, sample id -1).

Known costs, measured in BENCHMARKS.md: buckets of short samples hold many rows, so they emit
fewer batches per sample (short samples are "drawn less often" per step), and an epoch ends with
samples still waiting in buckets.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from jaxblend import identity
from jaxblend.sampling.token_budget_config import TokenBudgetConfig
from jaxblend.sampling.token_budget_plan import PLAN_VERSION, TokenBudgetPlan


def _visiting_order(n: int, config: TokenBudgetConfig) -> np.ndarray:
    """Sample ids in visiting order over every epoch (index order, or a seeded permutation)."""
    if config.seed is None:
        return np.tile(np.arange(n, dtype=np.int64), config.num_epochs)
    return np.concatenate([
        np.random.default_rng([int(config.seed), epoch]).permutation(n).astype(np.int64)
        for epoch in range(config.num_epochs)
    ])


def plan_token_budget(lengths: np.ndarray, config: TokenBudgetConfig) -> TokenBudgetPlan:
    """Computes the token-budget batch plan (see the module docstring). Vectorized numpy.

    Args:
      lengths: int[n] length of each sample (sample id = position).
      config: the bucketing rules.

    Raises:
      ValueError: if a length is negative.
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise ValueError(f"sample lengths must be >= 0, got {int(lengths.min())}")
    b_len, b_rows = config.bucket_lengths(), config.bucket_rows()
    clipped = (
        np.minimum(lengths, config.max_length) if config.over_length == "truncate" else lengths
    )
    kept = (clipped > 0) & (clipped <= config.max_length)
    bucket_of = np.where(kept, (clipped - 1) // config.bucket_width, -1)
    visit = _visiting_order(lengths.size, config)
    visit = visit[bucket_of[visit] >= 0]
    buckets = bucket_of[visit]
    # Stable sort by bucket keeps visiting order inside each bucket; chunk each bucket by R_b.
    by_bucket = np.argsort(buckets, kind="stable")
    sorted_buckets = buckets[by_bucket]
    starts = np.searchsorted(sorted_buckets, np.arange(config.num_buckets), side="left")
    ends = np.searchsorted(sorted_buckets, np.arange(config.num_buckets), side="right")
    none = np.zeros(0, np.int64)
    batch_bucket, batch_time, batch_members = [none], [none], []
    pad_after = visit.size  # leftover batches come after every full batch
    for b in range(config.num_buckets):
        members = by_bucket[starts[b] : ends[b]]  # positions in `visit`, in visiting order
        r = int(b_rows[b])
        full = members.size // r
        if full:
            chunks = members[: full * r].reshape(full, r)
            batch_bucket.append(np.full(full, b, np.int64))
            batch_time.append(chunks[:, -1])
            batch_members.append(visit[chunks])
        rest = members[full * r :]
        if rest.size and config.leftover == "pad":
            row = np.full(r, -1, np.int64)
            row[: rest.size] = visit[rest]
            batch_bucket.append(np.array([b], np.int64))
            batch_time.append(np.array([pad_after + b], np.int64))
            batch_members.append(row[None, :])
    order = np.argsort(np.concatenate(batch_time), kind="stable")
    step_bucket = np.concatenate(batch_bucket)[order].astype(np.int32)
    rows = [m for ms in batch_members for m in ms]
    row_ids = np.concatenate([none, *(rows[i] for i in order)]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(b_rows[step_bucket].astype(np.int64))]).astype(
        np.int64
    )
    return TokenBudgetPlan(
        step_bucket=step_bucket,
        step_offsets=offsets,
        row_ids=row_ids,
        bucket_lengths=b_len,
        bucket_rows=b_rows,
        fingerprint=identity.fingerprint(
            "token_budget_plan", PLAN_VERSION, config=dataclasses.asdict(config),
            # the lengths' content digest: the plan is a function of every length
            lengths_sha256=hashlib.sha256(np.ascontiguousarray(lengths, np.int64).tobytes()).hexdigest(),
        ),
    )

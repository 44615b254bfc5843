"""Token-budget batching with length buckets: an offline plan and its loader.

See docs/design.md, 'Token-budget batching'.

The plan is computed once from the samples' lengths, in a global order fixed by a seed, so it is
the same on every host and resumable from a step number; no host reads data to decide batches.

Rules (`BucketConfig`): sample lengths above `max_length` are skipped or truncated; empty samples
are skipped; a sample of length L goes to bucket `b = (L - 1) // bucket_width`, whose upper
length is `U_b = min((b + 1) * bucket_width, max_length)`. Bucket b's batches have
`R_b = floor(token_budget / U_b)` rows rounded *down* to a multiple of `row_multiple`, so
`R_b * U_b <= token_budget` and every batch is `[R_b, U_b]`: one shape per bucket, a bounded
number of XLA programs. Visiting samples in order, bucket b emits a batch as soon as it holds R_b
samples (one more would exceed the budget at `U_b`); batches are numbered by emission. At the end of
an epoch the buckets keep their partial contents into the next epoch; after the last epoch they are
dropped (`leftover="drop"`) or emitted as full-shape batches whose missing rows are empty
(`leftover="pad"`, sample id -1, all padding).

Data sharding: set `row_multiple` to (a multiple of) the number of data shards of the mesh
(e.g. the size of the `data` x `fsdp` axes); then every `R_b` divides evenly over it and the loader
lays batches out on any mesh whose data-shard count divides `row_multiple`.

Known costs, measured in BENCHMARKS.md: buckets of short samples hold many rows, so they emit
fewer batches per sample (short samples are "drawn less often" per step), and an epoch ends with
samples still waiting in buckets.

`make_bucketed_loader` mirrors `make_loader`: a `grain.DataLoader` whose record k is this
process's rows of planned batch k (`rows_by_process` on a batch of `R_b` rows), laid out with
`make_global_batch`; state `{"step", "fingerprint"}`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np
from jax.sharding import Mesh

from jaxblend.loading import global_batch
from jaxblend.loading import loader as loader_lib
from jaxblend.sampling import rows_by_process

PLAN_VERSION = 1
_OVER_LENGTH = ("skip", "truncate")
_LEFTOVER = ("drop", "pad")
_PLAN_ARRAYS = ("step_bucket", "step_offsets", "sample_ids", "bucket_lengths", "bucket_rows")


@dataclasses.dataclass(frozen=True)
class BucketConfig:
    """How samples are grouped into token-budget batches.

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
        for name, low in (
            ("bucket_width", 1),
            ("max_length", 1),
            ("token_budget", 1),
            ("row_multiple", 1),
            ("num_epochs", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"BucketConfig.{name} must be an integer >= {low}, got {value!r}")
        if self.over_length not in _OVER_LENGTH:
            raise ValueError(
                f"BucketConfig.over_length must be one of {_OVER_LENGTH}, got {self.over_length!r}"
            )
        if self.leftover not in _LEFTOVER:
            raise ValueError(
                f"BucketConfig.leftover must be one of {_LEFTOVER}, got {self.leftover!r}"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, (int, np.integer))
            or self.seed < 0
        ):
            raise ValueError(
                f"BucketConfig.seed must be None or an integer >= 0, got {self.seed!r}"
            )
        smallest = self.row_multiple * self.max_length
        if self.token_budget < smallest:
            raise ValueError(
                f"BucketConfig.token_budget={self.token_budget} must be >= row_multiple x max_length "
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


@dataclasses.dataclass(frozen=True, eq=False)
class BucketPlan:
    """Planned batches: step k has bucket `step_bucket[k]` and samples
    `sample_ids[step_offsets[k]:step_offsets[k + 1]]` (`bucket_rows[step_bucket[k]]` of them, -1 =
    empty row), padded to `bucket_lengths[step_bucket[k]]` tokens.

    Attributes:
      step_bucket: int32[steps].
      step_offsets: int64[steps + 1].
      sample_ids: int64[total rows].
      bucket_lengths: int32[buckets] padded length per bucket.
      bucket_rows: int32[buckets] rows per batch of each bucket.
      fingerprint: identity of the plan (config + lengths).
    """

    step_bucket: np.ndarray
    step_offsets: np.ndarray
    sample_ids: np.ndarray
    bucket_lengths: np.ndarray
    bucket_rows: np.ndarray
    fingerprint: str

    def __post_init__(self):
        self.validate()

    def __len__(self) -> int:
        return int(self.step_bucket.shape[0])

    @property
    def num_steps(self) -> int:
        """Number of planned batches."""
        return len(self)

    def batch(self, step: int) -> tuple[int, np.ndarray]:
        """`(bucket, sample ids)` of batch `step` (ids may contain -1 for empty rows)."""
        if not 0 <= step < len(self):
            raise IndexError(f"plan step {step} out of range [0, {len(self)})")
        lo, hi = int(self.step_offsets[step]), int(self.step_offsets[step + 1])
        return int(self.step_bucket[step]), np.asarray(self.sample_ids[lo:hi])

    def shape(self, step: int) -> tuple[int, int]:
        """`(rows, padded length)` of batch `step`."""
        b = int(self.step_bucket[step])
        return int(self.bucket_rows[b]), int(self.bucket_lengths[b])

    def shapes(self) -> set[tuple[int, int]]:
        """The distinct batch shapes of the plan."""
        used = np.unique(np.asarray(self.step_bucket))
        return {(int(self.bucket_rows[b]), int(self.bucket_lengths[b])) for b in used}

    def validate(self) -> None:
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
        if int(self.step_offsets[0]) != 0 or int(self.step_offsets[-1]) != self.sample_ids.shape[0]:
            raise ValueError("bucket plan: step_offsets must start at 0 and end at len(sample_ids)")
        b = np.asarray(self.step_bucket)
        if b.min() < 0 or b.max() >= nb:
            raise ValueError(f"bucket plan: step_bucket values must be in [0, {nb})")
        if not np.array_equal(np.diff(self.step_offsets), np.asarray(self.bucket_rows)[b]):
            raise ValueError(
                "bucket plan: rows per step disagree with bucket_rows of the step's bucket"
            )

    def save(self, directory: str | os.PathLike) -> None:
        """Writes the plan as .npy files + plan.json into `directory` (atomically, via a temp dir)."""
        directory = os.fspath(directory)
        parent = os.path.dirname(os.path.abspath(directory))
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".bucket_plan.", dir=parent)
        for name in _PLAN_ARRAYS:
            np.save(os.path.join(tmp, f"{name}.npy"), np.asarray(getattr(self, name)))
        with open(os.path.join(tmp, "plan.json"), "w") as f:
            json.dump(
                {"version": PLAN_VERSION, "fingerprint": self.fingerprint, "steps": len(self)}, f
            )
        if os.path.isdir(directory):
            old = tempfile.mkdtemp(prefix=".bucket_plan.old.", dir=parent)
            os.replace(directory, os.path.join(old, "plan"))
            os.replace(tmp, directory)
            for name in os.listdir(os.path.join(old, "plan")):
                os.remove(os.path.join(old, "plan", name))
            os.rmdir(os.path.join(old, "plan"))
            os.rmdir(old)
        else:
            os.replace(tmp, directory)

    @staticmethod
    def load(directory: str | os.PathLike, *, mmap: bool = True) -> BucketPlan:
        """Loads a saved plan (arrays memory-mapped by default).

        Raises:
          ValueError: if files are missing, the version differs or the arrays disagree.
        """
        directory = os.fspath(directory)
        meta_path = os.path.join(directory, "plan.json")
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            arrays = {
                name: np.load(
                    os.path.join(directory, f"{name}.npy"), mmap_mode="r" if mmap else None
                )
                for name in _PLAN_ARRAYS
            }
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"bucket plan {directory}: cannot read ({err})") from err
        if meta.get("version") != PLAN_VERSION:
            raise ValueError(
                f"bucket plan {meta_path}: version {meta.get('version')} != {PLAN_VERSION}"
            )
        plan = BucketPlan(fingerprint=str(meta["fingerprint"]), **arrays)
        if len(plan) != meta.get("steps"):
            raise ValueError(
                f"bucket plan {meta_path}: {len(plan)} steps, plan.json says {meta.get('steps')}"
            )
        return plan


def plan_buckets(lengths: np.ndarray, config: BucketConfig) -> BucketPlan:
    """Computes the token-budget batch plan (see the module docstring). Vectorized numpy.

    Args:
      lengths: int[n] length of each sample (sample id = position).
      config: the bucketing rules.

    Returns:
      A `BucketPlan`.

    Raises:
      ValueError: if a length is negative.
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if lengths.size and lengths.min() < 0:
        raise ValueError(f"sample lengths must be >= 0, got {int(lengths.min())}")
    n = lengths.size
    b_len, b_rows = config.bucket_lengths(), config.bucket_rows()
    clipped = (
        np.minimum(lengths, config.max_length) if config.over_length == "truncate" else lengths
    )
    kept = (clipped > 0) & (clipped <= config.max_length)
    bucket_of = np.where(kept, (clipped - 1) // config.bucket_width, -1)
    orders = []
    for epoch in range(config.num_epochs):
        if config.seed is None:
            orders.append(np.arange(n, dtype=np.int64))
        else:
            orders.append(
                np.random.default_rng([int(config.seed), epoch]).permutation(n).astype(np.int64)
            )
    visit = np.concatenate(orders) if orders else np.zeros(0, np.int64)
    visit = visit[bucket_of[visit] >= 0]
    buckets = bucket_of[visit]
    # Stable sort by bucket keeps visiting order inside each bucket; chunk each bucket by R_b.
    by_bucket = np.argsort(buckets, kind="stable")
    sorted_buckets = buckets[by_bucket]
    starts = np.searchsorted(sorted_buckets, np.arange(config.num_buckets), side="left")
    ends = np.searchsorted(sorted_buckets, np.arange(config.num_buckets), side="right")
    batch_bucket, batch_time, batch_members = [], [], []
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
    if batch_bucket:
        bucket_arr = np.concatenate(batch_bucket)
        time_arr = np.concatenate(batch_time)
        order = np.argsort(time_arr, kind="stable")
        step_bucket = bucket_arr[order].astype(np.int32)
        rows = [m for ms in batch_members for m in ms]
        sample_ids = np.concatenate([rows[i] for i in order]).astype(np.int64)
    else:
        step_bucket = np.zeros(0, np.int32)
        sample_ids = np.zeros(0, np.int64)
    offsets = np.concatenate([[0], np.cumsum(b_rows[step_bucket].astype(np.int64))]).astype(
        np.int64
    )
    digest = hashlib.sha256()
    digest.update(repr(config).encode())
    digest.update(np.ascontiguousarray(lengths).tobytes())
    return BucketPlan(
        step_bucket=step_bucket,
        step_offsets=offsets,
        sample_ids=sample_ids,
        bucket_lengths=b_len,
        bucket_rows=b_rows,
        fingerprint=f"v{PLAN_VERSION}-{digest.hexdigest()[:32]}",
    )


class PaddedSource(Protocol):
    """What `make_bucketed_loader` needs from a source of variable-length samples."""

    fingerprint: str

    def get_padded_batch(self, sample_ids: np.ndarray, length: int) -> dict[str, np.ndarray]:
        """Samples `sample_ids` (-1 = empty row) padded or truncated to `length` tokens."""


class HostBucketSource:
    """Grain data source whose record k is this process's rows of planned batch k.

    Args:
      source: a `PaddedSource` (e.g. `jaxblend.sources.SequenceSource`).
      plan: the `BucketPlan`.
      rows_per_bucket: this process's row ids for each bucket's batch size.
    """

    def __init__(
        self, source: PaddedSource, plan: BucketPlan, rows_per_bucket: Sequence[np.ndarray]
    ):
        self.source = source
        self.plan = plan
        self.rows_per_bucket = [np.asarray(r, np.int64) for r in rows_per_bucket]

    def __len__(self) -> int:
        return len(self.plan)

    def __repr__(self) -> str:
        return f"HostBucketSource(source={self.source!r}, plan={self.plan.fingerprint}, steps={len(self.plan)})"

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        bucket, ids = self.plan.batch(int(step))
        rows = self.rows_per_bucket[bucket]
        return self.source.get_padded_batch(ids[rows], int(self.plan.bucket_lengths[bucket]))


def bucketed_fingerprint(source: PaddedSource, plan: BucketPlan) -> str | None:
    """What a resume state must match: the source's identity and the plan's (None: no identity)."""
    identity = loader_lib.source_identity(source)
    if identity is None:
        return None
    return hashlib.sha256(
        f"bucketed-v{PLAN_VERSION}|{identity}|{plan.fingerprint}".encode()
    ).hexdigest()[:32]


class BucketedLoader(loader_lib.StepLoader):
    """Iterator of global bucketed batches; create with `make_bucketed_loader`.

    Step k is planned batch k: `[R_b, U_b]` arrays of its bucket b, each process holding the rows
    `rows_by_process(R_b, sharding)` gives it.
    """

    def __init__(
        self,
        source: PaddedSource,
        plan: BucketPlan,
        mesh: Mesh,
        *,
        batch_axes: Sequence[str] = ("data",),
        prefetch: loader_lib.PrefetchOptions | None = None,
        process_index: int | None = None,
        start_step: int = 0,
    ):
        self.source = source
        self.plan = plan
        self.process_index = jax.process_index() if process_index is None else process_index
        batch_axes = tuple(batch_axes)
        sharding = global_batch.batch_sharding(mesh, batch_axes, 1)
        self.rows_per_bucket = []
        for b, r in enumerate(np.asarray(plan.bucket_rows).tolist()):
            if r == 0:
                self.rows_per_bucket.append(np.zeros(0, np.int64))
                continue
            try:
                rows = rows_by_process(int(r), sharding)
            except ValueError as err:
                raise ValueError(
                    f"bucket {b} has {r} rows per batch, which the mesh's batch axes "
                    f"{batch_axes} cannot split evenly; set BucketConfig.row_multiple to a "
                    f"multiple of the data-shard count ({err})"
                ) from err
            self.rows_per_bucket.append(rows.get(self.process_index, np.zeros(0, np.int64)))
        super().__init__(
            HostBucketSource(source, plan, self.rows_per_bucket), len(plan), mesh, batch_axes,
            bucketed_fingerprint(source, plan), prefetch or loader_lib.PrefetchOptions(), start_step,
        )

    def _layout(self, step: int) -> tuple[int, np.ndarray]:
        bucket = int(self.plan.step_bucket[step])
        return int(self.plan.bucket_rows[bucket]), self.rows_per_bucket[bucket]


def make_bucketed_loader(
    source: PaddedSource,
    plan: BucketPlan,
    mesh: Mesh,
    *,
    batch_axes: Sequence[str] = ("data",),
    worker_count: int = 0,
    worker_buffer_size: int = 2,
    read_threads: int = 1,
    device_prefetch: int = 1,
    start_step: int = 0,
    state: Mapping[str, Any] | None = None,
    process_index: int | None = None,
) -> BucketedLoader:
    """Builds an iterator of global token-budget batches following `plan`.

    Args:
      source: variable-length samples with `get_padded_batch` (e.g. `SequenceSource`).
      plan: from `plan_buckets(source.lengths, config)` (or `BucketPlan.load`).
      mesh: the training mesh (same on every process).
      batch_axes: mesh axes splitting the batch dimension.
      worker_count: Grain worker processes.
      worker_buffer_size: batches prepared ahead per worker.
      read_threads: Grain reader threads.
      device_prefetch: batches put on the devices ahead of the one consumed.
      start_step: first step (ignored when `state` is given).
      state: a dict from `BucketedLoader.state()`.
      process_index: this process (defaults to `jax.process_index()`).

    Returns:
      A `BucketedLoader` yielding `{key: jax.Array [R_b, U_b] or [R_b]}` per step.

    Raises:
      ValueError: if a bucket's row count does not split over the mesh, or the state is invalid.
    """
    loader = BucketedLoader(
        source,
        plan,
        mesh,
        batch_axes=batch_axes,
        prefetch=loader_lib.PrefetchOptions(
            worker_count=worker_count,
            worker_buffer_size=worker_buffer_size,
            read_threads=read_threads,
            device_prefetch=device_prefetch,
        ),
        process_index=process_index,
        start_step=start_step,
    )
    if state is not None:
        loader.restore(state)
    return loader

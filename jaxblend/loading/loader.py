"""make_loader: a Grain DataLoader of host-sharded rows -> an iterator of global `jax.Array` batches.

Flow per step k (the same program on every host):
  1. `jaxblend.sampling` gives this process's rows of global batch k (from the batch sharding);
  2. a `HostBatchSource` record = those rows, read through the source's `read_batch` (one batched
     storage call) in a `grain.DataLoader` (reader threads or worker processes, prefetch; its
     sampler is the global steps from the resume point on); the compact record is turned into
     the batch schema by `assemble_batch` (one compiled kernel) in this process, so only token
     windows cross from a worker;
  3. `make_global_batch` lays the rows out on the mesh; the next batch is put on the devices while
     the current one is consumed (device prefetch).

State is `{"step", "fingerprint", "version"}`: stateless resume from a step number, valid on any
topology because batch k is defined globally, refused when the fingerprint (source content and
configuration, global batch size) differs.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

import grain
import jax
import numpy as np
from jax.sharding import Mesh

from jaxblend.loading import global_batch
from jaxblend.sampling import StepSampler, batch_rows_for_process
from jaxblend.sources.base import BatchSource, stack_items

STATE_VERSION = 1
DEFAULT_REMOTE_READ_AHEAD = 8


@dataclasses.dataclass(frozen=True)
class PrefetchOptions:
    """How host batches are read and put on the devices ahead of use.

    Attributes:
      worker_count: Grain worker processes (0 = read in this process's threads).
      worker_buffer_size: batches each Grain worker prepares ahead.
      read_threads: Grain reader threads (with worker_count 0 they run in this process).
      read_buffer_size: host batches Grain keeps ready per reader.
      device_prefetch: global batches put on the devices ahead of the one being consumed.
      read_ahead: K, steps whose reads are kept in flight ahead of the one consumed (each step's
        byte ranges are known from the index maps, so step k + K is read while k trains); 0 =
        auto: `DEFAULT_REMOTE_READ_AHEAD` for sources read from an object store, else
        `read_threads`. Hides per-request latency: K steps x the requests of one step are in
        flight (bounded by `ObjectStoreOptions.request_concurrency`).
    """

    worker_count: int = 0
    worker_buffer_size: int = 2
    read_threads: int = 1
    read_buffer_size: int = 2
    device_prefetch: int = 1
    read_ahead: int = 0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value, low = getattr(self, field.name), 1
            if field.name in ("worker_count", "device_prefetch", "read_ahead"):
                low = 0
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{field.name} must be an integer >= {low}, got {value!r}")


    def grain_read_options(self, reads_remote: bool) -> grain.ReadOptions:
        """Grain's reader threads and buffer: `read_ahead` steps are read concurrently."""
        ahead = self.read_ahead or (DEFAULT_REMOTE_READ_AHEAD if reads_remote else 0)
        return grain.ReadOptions(
            num_threads=max(self.read_threads, ahead),
            prefetch_buffer_size=max(self.read_buffer_size, ahead),
        )


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """How global batches of a fixed size are formed.

    Attributes:
      global_batch_size: B, rows of every global batch (identical for any number of hosts).
      batch_axes: mesh axes the batch dimension is split over; other axes replicate it.
      num_steps: steps in the stream; None = every full batch of the source (`len // B`).
      prefetch: reading and prefetching options.
    """

    global_batch_size: int
    batch_axes: tuple[str, ...] = ("data",)
    num_steps: int | None = None
    prefetch: PrefetchOptions = PrefetchOptions()

    def __post_init__(self):
        if isinstance(self.global_batch_size, bool) or not isinstance(
            self.global_batch_size, (int, np.integer)
        ) or self.global_batch_size < 1:
            raise ValueError(f"global_batch_size must be an integer >= 1, got {self.global_batch_size!r}")
        if self.num_steps is not None and self.num_steps < 0:
            raise ValueError(f"num_steps must be >= 0 or None, got {self.num_steps}")
        object.__setattr__(self, "batch_axes", tuple(self.batch_axes))


class HostBatchSource:
    """Grain data source whose record `k` is this process's rows of global batch `k`.

    Args:
      source: a jaxblend source (`get_batch`) or any Grain random-access source of dict samples.
      rows: this process's row ids within a global batch (`jaxblend.sampling`).
      global_batch_size: B.
      num_steps: number of records (global steps).
    """

    def __init__(self, source: Any, rows: np.ndarray, global_batch_size: int, num_steps: int):
        self.source = source
        self.rows = np.asarray(rows, dtype=np.int64)
        self.global_batch_size = global_batch_size
        self.num_steps = num_steps

    def __len__(self) -> int:
        return self.num_steps

    def __repr__(self) -> str:
        return (
            f"HostBatchSource(source={self.source!r}, rows={self.rows.size}@{self.rows[:1].tolist()}"
            f", global_batch_size={self.global_batch_size}, num_steps={self.num_steps})"
        )

    def sample_ids(self, step: int) -> np.ndarray:
        """Global sample ids of this process's rows at `step`."""
        return np.int64(step) * np.int64(self.global_batch_size) + self.rows

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        if not 0 <= step < self.num_steps:
            raise IndexError(f"step {step} out of range [0, {self.num_steps})")
        ids = self.sample_ids(step)
        if hasattr(self.source, "read_batch"):
            return self.source.read_batch(ids)
        if hasattr(self.source, "get_batch"):
            return self.source.get_batch(ids)
        return stack_items([self.source[int(i)] for i in ids])

    def assemble(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Turns a record into the host batch (`assemble_batch` of two-phase sources)."""
        if hasattr(self.source, "assemble_batch"):
            return self.source.assemble_batch(raw)
        return raw


def source_identity(source: Any) -> str | None:
    """The source's `fingerprint` (a non-empty string), or None: `repr` is not an identity."""
    identity = getattr(source, "fingerprint", None)
    return identity if isinstance(identity, str) and identity else None


def loader_fingerprint(source: Any, global_batch_size: int) -> str | None:
    """What a resume state must match: the source's identity and the global batch size.

    None when the source has no fingerprint: such a loader cannot resume from a state.
    """
    identity = source_identity(source)
    if identity is None:
        return None
    text = f"v{STATE_VERSION}|{identity}|B={global_batch_size}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class StepLoader(Iterator[dict[str, jax.Array]]):
    """Global batches from a Grain data source whose record k is this host's part of step k.

    The machinery shared by every jaxblend loader: a `grain.DataLoader` over a `StepSampler`
    (stateless resume from a step), device prefetch, the data-wait clock, and the resume state
    `{"version", "step", "fingerprint"}`. Subclasses say how step k is laid out (`_layout`).

    Args:
      host_source: Grain data source; record k = this process's rows of global batch k.
      num_steps: steps in the stream.
      mesh: the training mesh.
      batch_axes: mesh axes that split the batch dimension.
      fingerprint: identity of the stream; a resume state must carry the same (None: the
        source has no identity and resuming from a state is refused).
      prefetch: reading and prefetching options.
      start_step: first step.
    """

    def __init__(
        self,
        host_source: Any,
        num_steps: int,
        mesh: Mesh,
        batch_axes: Sequence[str],
        fingerprint: str | None,
        prefetch: PrefetchOptions,
        start_step: int = 0,
    ):
        self.host_source = host_source
        self.num_steps = num_steps
        self.mesh = mesh
        self.batch_axes = tuple(batch_axes)
        self.fingerprint = fingerprint
        self.prefetch = prefetch
        self.wait_seconds = 0.0
        self._grain_iter = None
        self._start(start_step)

    def _assemble(self, record: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Turns a Grain record into the host batch, in this process (default: as is)."""
        return record

    @abc.abstractmethod
    def _layout(self, step: int) -> tuple[int, np.ndarray]:
        """(global batch size, this process's sorted rows) of global batch `step`."""

    def _start(self, step: int) -> None:
        if self._grain_iter is not None:
            self.close()
        if not 0 <= step <= self.num_steps:
            raise ValueError(f"start step {step} out of range [0, {self.num_steps}]")
        self._step = self._next_put = step
        self._queue: collections.deque[dict[str, jax.Array]] = collections.deque()
        loader = grain.DataLoader(
            data_source=self.host_source,
            sampler=StepSampler(self.num_steps, step),
            worker_count=self.prefetch.worker_count,
            worker_buffer_size=self.prefetch.worker_buffer_size,
            shard_options=grain.sharding.NoSharding(),
            read_options=self.prefetch.grain_read_options(self._reads_remote()),
        )
        self._grain_iter = iter(loader)
        self._exhausted = False

    def _reads_remote(self) -> bool:
        source = getattr(self.host_source, "source", None)
        return isinstance(source, BatchSource) and source.reads_remote

    @property
    def step(self) -> int:
        """The global step of the next batch `next()` returns."""
        return self._step

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> dict[str, jax.Array]:
        began = time.perf_counter()
        while not self._exhausted and len(self._queue) <= self.prefetch.device_prefetch:
            try:
                host = next(self._grain_iter)
            except StopIteration:
                self._exhausted = True
                break
            size, rows = self._layout(self._next_put)
            self._next_put += 1
            host = self._assemble(host)
            self._queue.append(
                global_batch.make_global_batch(host, rows, size, self.mesh, self.batch_axes)
            )
        if not self._queue:
            raise StopIteration
        self._step += 1
        batch = self._queue.popleft()
        self.wait_seconds += time.perf_counter() - began
        return batch

    def close(self) -> None:
        """Stops Grain's reader threads and worker processes; the loader is unusable after."""
        inner = getattr(self._grain_iter, "_iterator", None)
        if inner is not None and hasattr(inner, "close"):
            inner.close()
        self._queue.clear()
        self._exhausted = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def state(self) -> dict[str, Any]:
        """A small JSON-serializable resume state: the next step and the stream's fingerprint."""
        return {"version": STATE_VERSION, "step": self._step, "fingerprint": self.fingerprint}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continues the stream at `state["step"]` (any topology).

        Raises:
          ValueError: if the state is malformed or comes from a different configuration.
        """
        self._start(self.check_state(state))

    def check_state(self, state: Mapping[str, Any]) -> int:
        """Validates a resume state against this loader and returns its step."""
        if not isinstance(state, Mapping) or not {"version", "step", "fingerprint"} <= set(state):
            raise ValueError(
                f"loader state must be a dict with 'version', 'step' and 'fingerprint', got {state!r}"
            )
        if state["version"] != STATE_VERSION:
            raise ValueError(
                f"loader state version {state['version']!r} is not supported (expected {STATE_VERSION})"
            )
        if self.fingerprint is None:
            raise ValueError(
                "this loader's source has no fingerprint, so a state cannot be checked against it: "
                "give the source a `fingerprint` or restart from a step number (start_step)"
            )
        if state["fingerprint"] != self.fingerprint:
            raise ValueError(
                "loader state comes from a different data configuration (different source or "
                "plan): its fingerprint "
                f"{state['fingerprint']} != this loader's {self.fingerprint} (source, blend, seed, "
                "sequence length, batch size or batch plan changed)"
            )
        step = state["step"]
        if not isinstance(step, int) or not 0 <= step <= self.num_steps:
            raise ValueError(f"loader state step {step!r} out of range [0, {self.num_steps}]")
        return step


class GlobalBatchLoader(StepLoader):
    """Fixed-size global batches: step k holds samples `[k * B, (k + 1) * B)`. See `make_loader`."""

    def __init__(
        self,
        source: Any,
        mesh: Mesh,
        config: LoaderConfig,
        *,
        start_step: int = 0,
        process_index: int | None = None,
    ):
        self.source = source
        self.config = config
        self.process_index = jax.process_index() if process_index is None else process_index
        b = config.global_batch_size
        available = len(source) // b
        if config.num_steps is not None and config.num_steps > available:
            raise ValueError(
                f"num_steps={config.num_steps} needs {config.num_steps * b} samples but the source "
                f"has {len(source)} ({available} full batches of {b})"
            )
        num_steps = available if config.num_steps is None else config.num_steps
        sharding = global_batch.batch_sharding(mesh, config.batch_axes, 1)
        self.rows = batch_rows_for_process(b, sharding, self.process_index)
        super().__init__(
            HostBatchSource(source, self.rows, b, num_steps), num_steps, mesh, config.batch_axes,
            loader_fingerprint(source, b), config.prefetch, start_step,
        )

    def _layout(self, step: int) -> tuple[int, np.ndarray]:
        return self.config.global_batch_size, self.rows

    def _assemble(self, record: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.host_source.assemble(record)


def make_loader(
    source: Any,
    mesh: Mesh,
    *,
    global_batch_size: int,
    batch_axes: Sequence[str] = ("data",),
    worker_count: int = 0,
    worker_buffer_size: int = 2,
    read_threads: int = 1,
    device_prefetch: int = 1,
    read_ahead: int = 0,
    num_steps: int | None = None,
    start_step: int = 0,
    state: Mapping[str, Any] | None = None,
    process_index: int | None = None,
) -> GlobalBatchLoader:
    """Builds an iterator of global batches over `source` laid out on `mesh`.

    Args:
      source: a jaxblend source (GPTSource, BlendedSource, MockSource, masked sources) or any
        Grain random-access source returning dicts of equally-shaped numpy arrays.
      mesh: the training mesh (every process passes the same global mesh).
      global_batch_size: B.
      batch_axes: mesh axes that split the batch dimension.
      worker_count: Grain worker processes.
      worker_buffer_size: batches prepared ahead per worker.
      read_threads: Grain reader threads.
      device_prefetch: batches put on the devices ahead of the one consumed.
      read_ahead: steps read concurrently ahead of use (0 = auto; see `PrefetchOptions`).
      num_steps: stream length in steps; None = `len(source) // B`.
      start_step: first step (ignored when `state` is given).
      state: a dict from `GlobalBatchLoader.state()` to resume from.
      process_index: this process (defaults to `jax.process_index()`).

    Returns:
      A `GlobalBatchLoader`.
    """
    config = LoaderConfig(
        global_batch_size=global_batch_size,
        batch_axes=tuple(batch_axes),
        num_steps=num_steps,
        prefetch=PrefetchOptions(
            worker_count=worker_count,
            worker_buffer_size=worker_buffer_size,
            read_threads=read_threads,
            device_prefetch=device_prefetch,
            read_ahead=read_ahead,
        ),
    )
    loader = GlobalBatchLoader(
        source, mesh, config, start_step=start_step, process_index=process_index
    )
    if state is not None:
        loader.restore(state)
    return loader

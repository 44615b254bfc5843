"""make_loader: one loader of global `jax.Array` batches, for every step plan.

Flow per step k (the same program on every host):
  1. the step plan (`jaxblend.sampling`) gives the global sample ids of step k, and this process's
     share of it (`ProcessRows`, from the batch sharding) the rows it loads;
  2. a `HostStepSource` record = those rows, read through the source's `read_batch` (one batched
     storage call; `get_padded_batch` for bucketed steps) in a `ReadPool` whose reader threads
     follow the read-ahead window (fixed or adaptive), or in Grain's worker processes (a
     `grain.DataLoader`); either reads the steps from the resume point to the run's `end_step`
     only, so nothing past it is read ahead; the compact record is turned into the batch schema
     by `assemble_batch` (one compiled kernel) in this process, so only token windows cross from
     a worker;
  3. `make_global_batch` lays the rows out on the mesh; the next batch is put on the devices while
     the current one is consumed (device prefetch).

State is `{"step", "fingerprint", "version"}`: stateless resume from a step number, valid on any
topology because step k is defined globally by the plan, refused when the fingerprint (source
content and configuration, the plan's identity) differs (docs/design.md, "Resume state"). A
staged train split (`history=StagedHistory(...)`, a `--data_schedule` run) fingerprints only the
samples before the state's step and adds `"data_schedule"` (the schedule in steps): its future
stages may change at resume, its past ones may not (docs/schedules.md, "Edits at resume").
"""

from __future__ import annotations

import collections
import dataclasses
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Self, TypedDict

import grain
import jax
import numpy as np
from jax.sharding import Mesh

from jaxblend import grain_workers, identity
from jaxblend.loading import global_batch
from jaxblend.loading.host_source import HostStepSource
from jaxblend.loading.protocols import LoaderSource
from jaxblend.loading.read_pool import ReadPool
from jaxblend.loading.read_window import ReadWindow
from jaxblend.loading.resume_history import STATE_KEY, StagedHistory, explain_unscheduled
from jaxblend.loading.stall import StallWatch
from jaxblend.loading.telemetry import (
    DEFAULT_TELEMETRY,
    LoaderCounters,
    LoaderMetrics,
    TelemetryOptions,
    batch_tokens,
)
from jaxblend.mesh import default_batch_axes
from jaxblend.sampling import FixedStepPlan, ProcessRows, StepPlan, StepSampler
from jaxblend.sampling.data_schedule import first_sample
from jaxblend.storage import read_tally
from jaxblend.storage.read_tally import PendingReads
from jaxblend.validation import require_int

# 2: fingerprints built by `jaxblend.identity.fingerprint` from named fields (1 hashed reprs).
STATE_VERSION = 2
DEFAULT_REMOTE_READ_AHEAD = 8
DEFAULT_READ_AHEAD_MEMORY = 1 << 30


class LoaderState(TypedDict, total=False):
    """A loader's resume state (JSON): the next step and the identity of the stream (of its
    samples before that step for a staged split, which also saves its `data_schedule`)."""

    version: int
    step: int
    fingerprint: str | None
    data_schedule: dict


@dataclasses.dataclass(frozen=True)
class PrefetchOptions:
    """How host batches are read and put on the devices ahead of use.

    Attributes:
      worker_count: Grain worker processes (0 = read in this process's threads).
      device_prefetch: global batches put on the devices ahead of the one being consumed.
      read_ahead: K, steps whose reads are kept in flight ahead of the one consumed (each step's
        byte ranges are known from the index maps, so step k + K is read while k trains); 0 =
        auto: `DEFAULT_REMOTE_READ_AHEAD` for sources read from an object store, else 1. Hides
        per-request latency: K steps x the requests of one step are in flight (bounded by
        `ObjectStoreOptions.request_concurrency`). With adaptation, the window it starts from.
      adaptive_read_ahead: let the read-ahead window grow while the loader waits for batches and
        shrink while it does not (`jaxblend.loading.read_window`), between 1 and
        `max_read_ahead` steps and within `read_ahead_memory`, starting from the fixed window.
        None (the default): on for sources read from an object store, off for local files
        (their reads take microseconds: the fixed window is never late); True / False force it.
        Only with `worker_count` 0 (reads in this process's threads).
      max_read_ahead: the adaptive window's largest size, steps (its `ReadPool` runs as many
        reader threads as the window holds steps, up to this).
      read_ahead_memory: bytes the records read ahead of the loader may hold (adaptive window).
    """

    worker_count: int = 0
    device_prefetch: int = 1
    read_ahead: int = 0
    adaptive_read_ahead: bool | None = None
    max_read_ahead: int = 32
    read_ahead_memory: int = DEFAULT_READ_AHEAD_MEMORY

    def __post_init__(self):
        for name, low in (("worker_count", 0), ("device_prefetch", 0), ("read_ahead", 0),
                          ("max_read_ahead", 1), ("read_ahead_memory", 1)):
            require_int(f"PrefetchOptions.{name}", getattr(self, name), low)
        if self.adaptive_read_ahead is not None and not isinstance(self.adaptive_read_ahead, bool):
            raise ValueError(
                "PrefetchOptions.adaptive_read_ahead must be True, False or None "
                f"(on for object stores), got {self.adaptive_read_ahead!r}"
            )

    def adapts(self, reads_remote: bool) -> bool:
        """Whether the read-ahead window adapts: `adaptive_read_ahead`, by default for sources
        read from an object store (`reads_remote`); only with reads in threads."""
        if self.worker_count:
            return False
        return reads_remote if self.adaptive_read_ahead is None else self.adaptive_read_ahead

    def initial_read_ahead(self, reads_remote: bool) -> int:
        """The read-ahead window a stream starts with (fixed: the whole time), steps."""
        return self.read_ahead or (DEFAULT_REMOTE_READ_AHEAD if reads_remote else 1)

    def grain_read_options(self, reads_remote: bool) -> grain.ReadOptions:
        """The reader threads and buffer of each Grain worker process: the fixed read-ahead's
        steps are read concurrently (reads in this process's threads run in a `ReadPool`)."""
        ahead = self.initial_read_ahead(reads_remote)
        return grain.ReadOptions(num_threads=ahead, prefetch_buffer_size=max(2, ahead))

    def read_window(
        self, reads_remote: bool, start: int, concurrency: int | None = None
    ) -> ReadWindow | None:
        """The read-ahead window of a stream read in this process's threads, starting at step
        `start` (None: reads in Grain worker processes): adaptive, or fixed at the initial size;
        `concurrency`: the object store's request concurrency, if known."""
        if self.worker_count:
            return None
        size = self.initial_read_ahead(reads_remote)
        if not self.adapts(reads_remote):
            return ReadWindow(start, size, size, size, self.read_ahead_memory)
        high = max(self.max_read_ahead, size)
        return ReadWindow(start, size, 1, high, self.read_ahead_memory, concurrency)


def loader_fingerprint(source: LoaderSource, plan: StepPlan) -> str | None:
    """What a resume state must match: the source's identity and the plan's.

    None when the source has no fingerprint: such a loader cannot resume from a state.
    """
    if not source.fingerprint:
        return None
    return identity.fingerprint(
        "loader_state", STATE_VERSION, source=source.fingerprint, plan=plan.fingerprint
    )


class StepLoader(Iterator[dict[str, jax.Array]]):
    """Global batches of a step plan over a source, laid out on a mesh; see `make_loader`.

    Reads in a `ReadPool` or Grain's worker processes from a step on (stateless resume from a
    step), device prefetch, the figures of what it did (`metrics()`,
    `jaxblend.loading.telemetry`), stall reports (`jaxblend.loading.stall`), and the resume
    state `{"version", "step", "fingerprint"}` (plus `"data_schedule"` with a `history`). Its
    arguments are `make_loader`'s, with the step plan given.

    Only the batch sizes of the steps the loader runs (from its first step on) must split over
    the batch axes: a run resumed in the middle of a batch-size schedule may use more data shards
    than its early, smaller batches allowed.

    Raises:
      ValueError: if the plan needs more samples than the source has, a batch size from the first
        step on does not split over the batch axes, a bucketed plan meets a source without padded
        reads, `end_step` is not a step of the plan or lies before the first step, or `state`
        is refused.
    """

    def __init__(
        self,
        source: LoaderSource,
        plan: StepPlan,
        mesh: Mesh,
        *,
        batch_axes: Sequence[str] | None = None,
        prefetch: PrefetchOptions = PrefetchOptions(),
        start_step: int = 0,
        process_index: int | None = None,
        history: StagedHistory | None = None,
        state: Mapping[str, object] | None = None,
        telemetry: TelemetryOptions = DEFAULT_TELEMETRY,
        end_step: int | None = None,
    ):
        if plan.num_samples > len(source):
            raise ValueError(
                f"the step plan ({plan.num_steps} steps, {plan.fingerprint}) needs "
                f"{plan.num_samples} samples but the source has {len(source)}"
            )
        self.source = source
        self.plan = plan
        self.num_steps = plan.num_steps
        self.end_step = _checked_end_step(end_step, plan.num_steps)
        self.mesh = mesh
        axes = default_batch_axes(mesh.axis_names) if batch_axes is None else batch_axes
        if not axes and batch_axes is None:
            raise ValueError(
                f"the mesh's axes {tuple(mesh.axis_names)} have neither 'data' nor 'fsdp': pass "
                "batch_axes= naming the axes that split the batch (() to copy it whole to every "
                "device)"
            )
        self.batch_axes = tuple(axes)
        self.prefetch = prefetch
        self.process_index = jax.process_index() if process_index is None else process_index
        self._sharding = global_batch.batch_sharding(mesh, self.batch_axes, 1)
        self.process_rows: ProcessRows | None = None
        self.host_source: HostStepSource | None = None
        self.fingerprint = loader_fingerprint(source, plan)
        self.history = history
        self.wait_seconds = 0.0
        self.telemetry = telemetry
        self._counters = LoaderCounters()
        if telemetry.collect:
            read_tally.start_retry_count()
        self._pending = PendingReads()
        self._stall: StallWatch | None = None
        self._queued_tokens: collections.deque[int] = collections.deque()
        self._records: Iterator[dict[str, np.ndarray]] | None = None  # a ReadPool or Grain's
        self._queue: collections.deque[dict[str, jax.Array]] = collections.deque()
        self._start(start_step if state is None else self.check_state(state))

    def _start(self, step: int) -> None:
        """Starts the stream at `step`: this process's rows of the steps from `step` on (each of
        their batch sizes must split over the mesh; earlier ones need not), then the sampler.

        Raises:
          ValueError: if `step` is out of range or a batch size from it on does not split; the
            loader is left as it was.
        """
        if not 0 <= step <= self.num_steps:
            raise ValueError(f"start step {step} out of range [0, {self.num_steps}]")
        if step > self.end_step:
            raise ValueError(
                f"start step {step} is past the loader's end_step {self.end_step}: pass an "
                "end_step at or after the step the loader starts (or resumes) from"
            )
        if self.process_rows is None or self.process_rows.from_step != step:
            rows = ProcessRows.of(self.plan, self._sharding, self.process_index, from_step=step)
            host_source = HostStepSource(
                self.source, rows, tally=self.telemetry.collect, pending=self._pending
            )
            self.process_rows, self.host_source = rows, host_source
        self.close()
        self._window = self.prefetch.read_window(
            self.source.reads_remote, step, _request_concurrency(self.source)
        )
        self.host_source.window = self._window
        self._step = self._next_put = step
        if self.telemetry.stall_threshold > 0:
            self._stall = StallWatch(self.telemetry.stall_threshold, self._pending,
                                     self.prefetch.worker_count, self._counters)
            weakref.finalize(self, self._stall.stop)
        self._exhausted = False
        if self._window is not None:
            pool = ReadPool(self.host_source.__getitem__, step, self.end_step, self._window)
            weakref.finalize(self, pool.close)  # a loader dropped without `close` ends its readers
            self._records = pool
            return
        grain_workers.prepare()
        loader = grain.DataLoader(
            data_source=self.host_source,
            sampler=StepSampler(self.end_step, step),
            worker_count=self.prefetch.worker_count,
            worker_buffer_size=2,
            shard_options=grain.sharding.NoSharding(),
            read_options=self.prefetch.grain_read_options(self.source.reads_remote),
        )
        self._records = iter(loader)
        grain_workers.track(self)

    def start_reading(self) -> None:
        """Starts reading the first steps now, in the background (the reader threads or worker
        processes), rather than at the first `next()`: e.g. while a checkpoint is restored and the
        step function compiles. Idempotent."""
        if self._records is not None:
            self._records.start_prefetch()

    @property
    def step(self) -> int:
        """The global step of the next batch `next()` returns."""
        return self._step

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> dict[str, jax.Array]:
        began = time.perf_counter()
        stall = self._stall
        while not self._exhausted and len(self._queue) <= self.prefetch.device_prefetch:
            if stall is not None:
                stall.begin(self._next_put)
            pulling = time.perf_counter()
            try:
                host = next(self._records)
            except StopIteration:
                self._stop_reading()
                break
            finally:
                if stall is not None:
                    stall.end()
            assembling = time.perf_counter()
            step = self._next_put
            self._next_put += 1
            tally = HostStepSource.take_tally(host)
            step_bytes = sum(getattr(v, "nbytes", 0) for v in host.values())  # as read
            self._counters.note_ahead(0 if self._window is None else self._window.ahead, step_bytes)
            if self._window is not None:
                requests = sum(tally.requests.values()) if tally is not None else 0
                self._window.taken(step, assembling - pulling, step_bytes, requests)
            host = self.host_source.assemble(step, host)
            self._queued_tokens.append(batch_tokens(host))
            self._queue.append(global_batch.make_global_batch(
                host, self.process_rows.rows(step), self.plan.batch_size(step), self.mesh,
                self.batch_axes,
            ))
            self._counters.add_batch(tally, time.perf_counter() - assembling)
        waited = time.perf_counter() - began
        if not self._queue:
            self._counters.add_delivered(None, waited)
            raise StopIteration
        self.wait_seconds += waited
        self._step += 1
        self._counters.add_delivered(self._queued_tokens.popleft(), waited)
        return self._queue.popleft()

    def metrics(self) -> LoaderMetrics:
        """What the loader did since it was made (cumulative; `later.since(earlier)` gives a
        window): batches, tokens, waiting, reading and assembly times, reads per store and
        dataset, read-ahead now, stall reports (docs/telemetry.md). Safe from any thread."""
        if self.prefetch.worker_count:
            return self._counters.snapshot(None, None)
        window, adapts = self._window, self.prefetch.adapts(self.source.reads_remote)
        return self._counters.snapshot(window.ahead, window.size if adapts else None)

    def close(self) -> None:
        """Stops the reader threads and Grain's worker processes and releases the shared memory of
        their batches; the loader is unusable after (`restore` starts it again).

        Grain's iterator releases them when it is released (its pipeline closes on deletion), so
        the loader drops its only reference; a `ReadPool` is closed. A loader with workers that is
        still open at exit is closed then (`grain_workers.track`).
        """
        self._queue.clear()
        self._queued_tokens.clear()
        if self._stall is not None:
            self._stall.stop()
            self._stall = None
        self._stop_reading()

    def _stop_reading(self) -> None:
        """Drops the reads (at the stream's end, or on `close`): closes a `ReadPool`; with Grain's
        workers, frees the batches it keeps in reference cycles, unlinking their shared memory
        (`grain_workers.release`)."""
        had_workers = self._records is not None and self.prefetch.worker_count > 0
        if isinstance(self._records, ReadPool):
            self._records.close()
        self._records = None
        self._exhausted = True
        if had_workers:
            grain_workers.untrack(self)
            grain_workers.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fingerprint_at(self, step: int) -> str | None:
        """The fingerprint a state at `step` carries: the whole stream's, or (staged split) the
        identity of the samples of its steps [0, step) and the plan's."""
        if self.history is None or self.fingerprint is None:
            return self.fingerprint
        return identity.fingerprint(
            "loader_history", STATE_VERSION,
            source=self.history.identity(first_sample(self.plan, step)),
            plan=self.plan.fingerprint,
        )

    def state(self) -> LoaderState:
        """A small JSON-serializable resume state: the next step and the stream's fingerprint
        (a staged split: of the steps before it, and the data schedule in steps)."""
        state: LoaderState = {
            "version": STATE_VERSION, "step": self._step,
            "fingerprint": self._fingerprint_at(self._step),
        }
        if self.history is not None:
            state[STATE_KEY] = self.history.saved()
        return state

    def restore(self, state: Mapping[str, object]) -> None:
        """Continues the stream at `state["step"]` (any topology whose data shards split every
        batch size from that step on).

        Raises:
          ValueError: if the state is malformed or comes from a different configuration, or a
            batch size from its step on does not split over the batch axes (the loader is then
            left as it was).
        """
        self._start(self.check_state(state))

    def check_state(self, state: Mapping[str, object]) -> int:
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
        step = state["step"]
        if not isinstance(step, int) or not 0 <= step <= self.num_steps:
            raise ValueError(f"loader state step {step!r} out of range [0, {self.num_steps}]")
        if state["fingerprint"] != self._fingerprint_at(step):
            explained = (
                explain_unscheduled(state, step) if self.history is None
                else self.history.explain_mismatch(state, step)
            )
            if explained is not None:
                raise ValueError(explained)
            raise ValueError(
                "loader state comes from a different data configuration (different source or "
                f"plan): its fingerprint {state['fingerprint']} != this loader's "
                f"{self._fingerprint_at(step)} (source, blend, seed, "
                "sequence length, batch size or batch plan changed); to resume, use the same data "
                "flags as the run that saved it; to continue deliberately with the new data, start "
                "a new workdir/checkpoint directory, or restart from a step number (start_step) "
                "instead of the saved state"
            )
        return step


def make_loader(
    source: LoaderSource,
    mesh: Mesh,
    *,
    plan: StepPlan | None = None,
    global_batch_size: int | None = None,
    num_steps: int | None = None,
    batch_axes: Sequence[str] | None = None,
    prefetch: PrefetchOptions = PrefetchOptions(),
    start_step: int = 0,
    state: Mapping[str, object] | None = None,
    process_index: int | None = None,
    history: StagedHistory | None = None,
    telemetry: TelemetryOptions = DEFAULT_TELEMETRY,
    end_step: int | None = None,
) -> StepLoader:
    """Builds an iterator of global batches over `source` laid out on `mesh`.

      make_loader(source, mesh, global_batch_size=B)  # FixedStepPlan over the source
      make_loader(source, mesh, plan=plan)            # any StepPlan (fixed, ramp-up, buckets)

    Args:
      source: a jaxblend source (GPTSource, BlendedSource, MockSource, masked sources,
        SequenceSource) or a plain Grain source wrapped in `GrainSourceAdapter`.
      mesh: the training mesh (every process passes the same global mesh).
      plan: the step plan; exactly one of `plan` and `global_batch_size`.
      global_batch_size: B of a fixed-size plan over the source.
      num_steps: steps of the fixed-size plan; None = every full batch of the source.
      batch_axes: mesh axes that split the batch dimension; None: the mesh's `data` and `fsdp`
        axes (`jaxblend.mesh.default_batch_axes`), as the training example splits it; a mesh
        with neither must name its axes here.
      prefetch: Grain workers, reader threads, buffers, read-ahead and device prefetch.
      start_step: first step (ignored when `state` is given).
      state: a dict from `StepLoader.state()` to resume from; the mesh need only split the
        batch sizes from its step on (a resume mid-schedule may use more data shards).
      process_index: this process (defaults to `jax.process_index()`).
      history: a staged train split's `StagedHistory` (a `--data_schedule` run): the state then
        checks only the steps before its own, so future stages may change at resume.
      telemetry: what the loader counts (`StepLoader.metrics()`) and after how many seconds of
        waiting it reports a stall (docs/telemetry.md).
      end_step: the step this run's stream ends at (exclusive; None = the plan's end): nothing
        from it on is yielded or read ahead. A tool that takes N batches from step s passes
        s + N; the resume state is the same as without it.

    With `prefetch.worker_count > 0`, Grain's worker processes are started with `spawn`: a script
    must keep its top-level code under `if __name__ == "__main__":` (a worker that runs it anyway
    stops with one line saying so); see `jaxblend.grain_workers`.

    Returns:
      A `StepLoader`.

    Raises:
      SystemExit: in a Grain worker process running a script's unguarded top-level code.
      TypeError: if `mesh` is not a `Mesh` or `prefetch` not a `PrefetchOptions`.
      ValueError: unless exactly one of `plan` and `global_batch_size` is given (`num_steps` only
        with `global_batch_size`), or on any `StepLoader` error.
    """
    grain_workers.refuse_unguarded_main()
    for name, value, kind, shown in (
        ("mesh", mesh, Mesh, "jax.sharding.Mesh"), ("prefetch", prefetch, PrefetchOptions, None),
        ("telemetry", telemetry, TelemetryOptions, None),
    ):
        if not isinstance(value, kind):
            raise TypeError(
                f"make_loader(source, mesh, *, plan=... or global_batch_size=...): {name} must be "
                f"a {shown or kind.__name__}, got {type(value).__name__}"
            )
    if (plan is None) == (global_batch_size is None) or (plan is not None and num_steps is not None):
        raise ValueError(
            "make_loader needs exactly one of plan= (which fixes the batch sizes and the number of "
            "steps) or global_batch_size= (with optional num_steps=)"
        )
    if plan is None:
        plan = FixedStepPlan.covering(len(source), global_batch_size, num_steps)
    return StepLoader(
        source, plan, mesh, batch_axes=batch_axes, prefetch=prefetch, start_step=start_step,
        process_index=process_index, history=history, state=state, telemetry=telemetry,
        end_step=end_step,
    )


def _checked_end_step(end_step: int | None, num_steps: int) -> int:
    """The step a stream ends at: `end_step`, checked to be a step of the plan (or its end), or
    the plan's end when None.

    Raises:
      ValueError: if `end_step` is not an int in [0, num_steps].
    """
    if end_step is None:
        return num_steps
    require_int("end_step", end_step, 0)
    if end_step > num_steps:
        raise ValueError(
            f"end_step {end_step} is past the step plan's {num_steps} steps: pass at most "
            f"{num_steps} (or None for the plan's end)"
        )
    return int(end_step)


def _request_concurrency(source: LoaderSource) -> int | None:
    """The request concurrency of the `DataAccess` a source reads with (sources that carry one,
    e.g. `GPTSource`), else None."""
    access = getattr(source, "access", None)
    store = getattr(access, "object_store", None)
    return getattr(store, "request_concurrency", None)


"""What the loader did: per-step and cumulative figures, as one small typed object.

`StepLoader.metrics()` returns a `LoaderMetrics`: cumulative since the loader started; the
difference of two (`later.since(earlier)`) is a window's (one step, one log interval). Figures
are gathered once per batch, never per range: each step's reads are counted into a
`jaxblend.storage.read_tally.ReadTally` where they happen (reader thread or Grain worker), and the
loader adds the tally to its `LoaderCounters` when it takes the batch. docs/telemetry.md explains
every figure.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from jaxblend.storage.read_tally import ReadTally

# Latency histogram: upper bounds 10 us x 2^(i/4) (a quarter octave, ~19% wide), up to ~22 min.
LATENCY_BOUNDS = 1e-5 * 2.0 ** (np.arange(108) / 4)
PROMETHEUS_EVERY = 4  # the Prometheus histogram keeps every 4th bound (powers of two)
_TOKEN_KEYS = ("inputs", "tokens", "encoder_tokens")  # GPT, BERT, T5 batch schemas
_CUMULATIVE = ("steps", "tokens", "elapsed_seconds", "wait_seconds", "read_seconds",
               "assemble_seconds", "stalls")  # `LoaderMetrics` fields a window subtracts


@dataclasses.dataclass(frozen=True)
class TelemetryOptions:
    """What a loader measures and reports.

    Attributes:
      collect: count each step's reads (bytes, requests, latency, retries, per store and
        dataset); off, `metrics()` keeps only the wait and assembly times.
      stall_threshold: seconds the consumer may wait for a batch before a stall report names
        the reads still pending (repeated every `stall_threshold` seconds while the wait lasts);
        0 = no stall reports.
    """

    collect: bool = True
    stall_threshold: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.collect, bool):
            raise TypeError(f"TelemetryOptions.collect must be a bool, got {self.collect!r}")
        threshold = self.stall_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
            raise ValueError(
                f"TelemetryOptions.stall_threshold must be seconds >= 0 (0: off), got {threshold!r}"
            )


DEFAULT_TELEMETRY = TelemetryOptions()


@dataclasses.dataclass(frozen=True)
class StoreMetrics:
    """Reads from one store (local, gs, s3, ...).

    Attributes:
      bytes: bytes read (requested from an object store; copied from a mapped file).
      requests: range requests issued (0 for memory-mapped files).
      retries: retries TensorStore counted for this store kind.
      latency_counts: requests per latency bucket (`LATENCY_BOUNDS` upper bounds, then overflow).
      latency_sum: seconds, summed over the requests.
    """

    bytes: int = 0
    requests: int = 0
    retries: int = 0
    latency_counts: tuple[int, ...] = ()
    latency_sum: float = 0.0

    def latency_quantile(self, q: float) -> float | None:
        """The q-quantile of request latency, seconds (its bucket's upper bound, so at most ~19%
        above the true value); None without timed requests."""
        counts = np.asarray(self.latency_counts, np.int64)
        total = int(counts.sum()) if counts.size else 0
        if total == 0:
            return None
        i = int(np.searchsorted(np.cumsum(counts), q * total))
        return float(LATENCY_BOUNDS[min(i, LATENCY_BOUNDS.size - 1)])

    @property
    def latency_p50(self) -> float | None:
        return self.latency_quantile(0.5)

    @property
    def latency_p99(self) -> float | None:
        return self.latency_quantile(0.99)

    def since(self, earlier: StoreMetrics) -> StoreMetrics:
        counts = np.asarray(self.latency_counts, np.int64)
        if earlier.latency_counts:
            counts = counts - np.asarray(earlier.latency_counts, np.int64)
        return StoreMetrics(
            self.bytes - earlier.bytes, self.requests - earlier.requests,
            self.retries - earlier.retries, tuple(counts.tolist()),
            self.latency_sum - earlier.latency_sum,
        )

    def record(self) -> dict[str, Any]:
        """JSON figures: bytes, requests, retries and latency p50/p99 (seconds, or None)."""
        return {"bytes": self.bytes, "requests": self.requests, "retries": self.retries,
                "latency_p50": self.latency_p50, "latency_p99": self.latency_p99}


@dataclasses.dataclass(frozen=True)
class LoaderMetrics:
    """A loader's figures, cumulative since it started (or over a window: `since`).

    Attributes:
      steps: batches handed to the consumer.
      tokens: tokens of those batches loaded by this process (rows x sequence length).
      elapsed_seconds: wall time since the loader started.
      wait_seconds: time the consumer spent in `next()` waiting for batches.
      read_seconds: time spent reading steps (summed over concurrent reads, so it may exceed the
        wall time).
      assemble_seconds: time turning read records into device batches in this process.
      read_ahead_steps: steps whose reads have begun and that the loader has not taken yet (being
        read, or read and waiting), at this moment (None: reads run in Grain workers).
      read_ahead_peak_steps: the most such steps at once, when the loader took a step (None: reads
        run in Grain workers).
      read_ahead_window: the adaptive read-ahead window now, steps (None: fixed read-ahead).
      step_bytes: bytes of the last step's record as read (read-ahead memory is about
        `read_ahead_steps x step_bytes`).
      stalls: stall reports written.
      stores: reads per store name ("local", "gs", "s3", ...).
      dataset_bytes: bytes read per dataset prefix.
    """

    steps: int = 0
    tokens: int = 0
    elapsed_seconds: float = 0.0
    wait_seconds: float = 0.0
    read_seconds: float = 0.0
    assemble_seconds: float = 0.0
    read_ahead_steps: int | None = None
    read_ahead_peak_steps: int | None = None
    read_ahead_window: int | None = None
    step_bytes: int = 0
    stalls: int = 0
    stores: Mapping[str, StoreMetrics] = dataclasses.field(default_factory=dict)
    dataset_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def wait_fraction(self) -> float:
        return self.wait_seconds / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    def since(self, earlier: LoaderMetrics) -> LoaderMetrics:
        """The figures of the window between `earlier` and this snapshot (gauges: this one's)."""
        empty = StoreMetrics()
        return dataclasses.replace(
            self, **{k: getattr(self, k) - getattr(earlier, k) for k in _CUMULATIVE},
            stores={k: v.since(earlier.stores.get(k, empty)) for k, v in self.stores.items()},
            dataset_bytes={
                k: v - earlier.dataset_bytes.get(k, 0) for k, v in self.dataset_bytes.items()
                if v != earlier.dataset_bytes.get(k, 0)
            },
        )

    def record(self) -> dict[str, Any]:
        """The figures as a JSON object (`--metrics_jsonl`'s `"loader"`)."""
        return {
            "steps": self.steps, "tokens": self.tokens,
            "tokens_per_second": self.tokens_per_second,
            "wait_seconds": self.wait_seconds, "read_seconds": self.read_seconds,
            "assemble_seconds": self.assemble_seconds, "read_ahead_steps": self.read_ahead_steps,
            "read_ahead_peak_steps": self.read_ahead_peak_steps,
            "read_ahead_window": self.read_ahead_window, "step_bytes": self.step_bytes,
            "stalls": self.stalls,
            "stores": {k: v.record() for k, v in sorted(self.stores.items())},
            "dataset_bytes": dict(sorted(self.dataset_bytes.items())),
        }

    def summary(self) -> str:
        """A short text for a log line: bytes/s per store, request latency, retries, read-ahead."""
        parts = []
        seconds = self.elapsed_seconds
        for name, store in sorted(self.stores.items()):
            rate = store.bytes / seconds if seconds > 0 else 0.0
            part = f"{name} {rate / 1e6:.1f} MB/s" if rate >= 1e5 else f"{name} {rate / 1e3:.1f} kB/s"
            if store.requests:
                p50, p99 = store.latency_p50, store.latency_p99
                part += f" {store.requests} req"
                if p50 is not None:
                    part += f" p50/p99 {1e3 * p50:.0f}/{1e3 * p99:.0f} ms"
            if store.retries:
                part += f" {store.retries} retries"
            parts.append(part)
        if self.read_ahead_steps is not None:
            parts.append(f"ahead {self.read_ahead_steps}" + (
                f" (window {self.read_ahead_window})" if self.read_ahead_window is not None else ""
            ))
        if self.stalls:
            parts.append(f"{self.stalls} stalls")
        return ", ".join(parts)


class LoaderCounters:
    """The running totals behind `LoaderMetrics` (updated by the consuming thread, once per
    batch; `snapshot` may be called from any thread, e.g. a Prometheus scrape)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._began = time.perf_counter()
        self.steps = 0
        self.tokens = 0
        self.wait = 0.0
        self.read = 0.0
        self.assemble = 0.0
        self.stalls = 0
        self.peak_ahead = 0
        self.step_bytes = 0
        self._bytes: collections.Counter[str] = collections.Counter()
        self._requests: collections.Counter[str] = collections.Counter()
        self._retries: collections.Counter[str] = collections.Counter()
        self._latency: dict[str, np.ndarray] = {}
        self._latency_sum: collections.Counter[str] = collections.Counter()
        self._datasets: collections.Counter[str] = collections.Counter()

    def add_batch(self, tally: ReadTally | None, assemble_seconds: float) -> None:
        """Adds one batch's reads (its tally, if counted) and assembly time."""
        with self._lock:
            self.assemble += assemble_seconds
            if tally is None:
                return
            self.read += tally.read_seconds
            self._bytes.update(tally.bytes)
            self._requests.update(tally.requests)
            self._retries.update(tally.retries)
            self._datasets.update(tally.dataset_bytes)
            for name, seconds in tally.latencies.items():
                if not seconds:
                    continue
                counts = self._latency.get(name)
                if counts is None:
                    counts = self._latency[name] = np.zeros(LATENCY_BOUNDS.size + 1, np.int64)
                values = np.asarray(seconds)
                counts += np.bincount(np.searchsorted(LATENCY_BOUNDS, values),
                                      minlength=counts.size)
                self._latency_sum[name] += float(values.sum())

    def note_ahead(self, steps: int, step_bytes: int) -> None:
        """Notes the steps read ahead when the loader took one, and that step's record bytes
        (the consuming thread only: plain stores, no lock)."""
        self.peak_ahead = max(self.peak_ahead, steps)
        self.step_bytes = step_bytes

    def add_delivered(self, tokens: int | None, wait_seconds: float) -> None:
        """Counts `wait_seconds` in `next()` and the batch of `tokens` it handed to the consumer
        (None: no batch, the stream's end)."""
        with self._lock:
            self.wait += wait_seconds
            if tokens is not None:
                self.steps += 1
                self.tokens += tokens

    def add_stall(self) -> None:
        with self._lock:
            self.stalls += 1

    def snapshot(self, read_ahead_steps: int | None, window: int | None) -> LoaderMetrics:
        """The figures now (`read_ahead_steps` None: reads run in worker processes)."""
        with self._lock:
            names = set(self._bytes) | set(self._requests)
            stores = {
                name: StoreMetrics(
                    self._bytes[name], self._requests[name], self._retries[name],
                    tuple(self._latency[name].tolist()) if name in self._latency else (),
                    float(self._latency_sum[name]),
                )
                for name in names
            }
            return LoaderMetrics(
                steps=self.steps, tokens=self.tokens,
                elapsed_seconds=time.perf_counter() - self._began,
                wait_seconds=self.wait, read_seconds=self.read, assemble_seconds=self.assemble,
                read_ahead_steps=read_ahead_steps,
                read_ahead_peak_steps=None if read_ahead_steps is None else self.peak_ahead,
                read_ahead_window=window, step_bytes=self.step_bytes,
                stalls=self.stalls, stores=stores,
                dataset_bytes=dict(self._datasets),
            )


def batch_tokens(host: Mapping[str, np.ndarray]) -> int:
    """Tokens of a host batch: rows x sequence length of its token array (0 if it has none)."""
    for key in _TOKEN_KEYS:
        array = host.get(key)
        if array is not None and np.ndim(array) == 2:
            return int(np.size(array))
    return 0

"""What one batch's token reads cost, counted where they happen: bytes, requests, latency, retries.

A caller that wants the figures of its reads (the loader, per step) opens a `ReadTally` around
them with `collecting(tally)`; `TokenReader.read` adds to the tally of the calling thread, once
per call (never per range), and does nothing when no tally is open. The tally is a plain
picklable object, so a Grain worker process sends it back with the batch it describes.

* Stores are named by how the `.bin` is reached: "local" (a memory-mapped file, or the `file`
  driver), "gs", "s3", or the TensorStore driver's name (e.g. "memory").
* Requests and their bytes are the coalesced range requests issued (a memory-mapped file issues
  none: its bytes are the tokens copied).
* Each request's latency is the time from the batch's submission to its answer.
* Retries are TensorStore's own count for the store kind (`/tensorstore/kvstore/<driver>/retries`,
  per process): a tally gets the retries the process counted since the previous tally took its
  share (or since `start_retry_count()`, which a loader calls when it starts), so totals over
  many tallies are exact while one batch's share is approximate.

`PendingReads` is the registry of requests in flight that a stall report reads (`pending()`):
each entry is one object's coalesced requests of one call, registered before they are issued
and removed once they are placed; its steps being read are kept too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import tensorstore as ts

_local = threading.local()
_retry_lock = threading.Lock()
_retries_taken: dict[str, int] = {}  # per store kind: the process's retry count handed out so far

# TensorStore driver -> the store name the figures use
STORE_OF_DRIVER = {"file": "local", "gcs": "gs", "gcs_grpc": "gs", "s3": "s3"}
_RETRY_METRIC = {"gs": ("gcs", "gcs_grpc"), "s3": ("s3",), "local": ("file",)}


@dataclasses.dataclass
class ReadTally:
    """The reads of one batch (mutable while it is read, then handed to the loader).

    Attributes:
      bytes: bytes read, per store.
      requests: requests issued, per store.
      latencies: seconds from submission to answer of each request, per store.
      retries: retries TensorStore counted in this process, per store (see the module doc).
      dataset_bytes: bytes read per dataset (its prefix).
      read_seconds: wall time of the whole read (set by whoever opened the tally).
      pending: where requests in flight are registered (None: not registered).
    """

    bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    requests: dict[str, int] = dataclasses.field(default_factory=dict)
    latencies: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    retries: dict[str, int] = dataclasses.field(default_factory=dict)
    dataset_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    read_seconds: float = 0.0
    pending: PendingReads | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["pending"] = None  # in-process only
        return state

    def add(self, store: str, nbytes: int, requests: int = 0) -> None:
        """Counts `nbytes` and `requests` of one store."""
        self.bytes[store] = self.bytes.get(store, 0) + nbytes
        if requests:
            self.requests[store] = self.requests.get(store, 0) + requests

    def add_dataset(self, name: str, nbytes: int) -> None:
        """Counts `nbytes` read from dataset `name`."""
        self.dataset_bytes[name] = self.dataset_bytes.get(name, 0) + nbytes

    def add_latencies(self, store: str, seconds: list[float]) -> None:
        """Records request latencies of one store."""
        self.latencies.setdefault(store, []).extend(seconds)

    def take_retries(self) -> None:
        """Adds the retries this process counted, per store read from, since the last take."""
        for store in self.requests:
            counted = _take_retries(store)
            if counted:
                self.retries[store] = self.retries.get(store, 0) + counted


def current() -> ReadTally | None:
    """The tally open in this thread, if any."""
    return getattr(_local, "tally", None)


@contextlib.contextmanager
def collecting(tally: ReadTally) -> Iterator[ReadTally]:
    """Counts the token reads of this thread into `tally` for the block (and times the block)."""
    outer = getattr(_local, "tally", None)
    _local.tally = tally
    began = time.perf_counter()
    try:
        yield tally
    finally:
        tally.read_seconds += time.perf_counter() - began
        _local.tally = outer
        if tally.requests:
            tally.take_retries()


def store_retries(store: str) -> int:
    """TensorStore's retry count of a store kind in this process (0 for stores it does not count)."""
    total = 0
    for driver in _RETRY_METRIC.get(store, ()):
        for metric in ts.experimental_collect_matching_metrics(f"/tensorstore/kvstore/{driver}/retries"):
            for value in metric.get("values", ()):
                total += int(value.get("value", 0))
    return total


def start_retry_count() -> None:
    """Starts counting retries for tallies now (retries before it, e.g. while opening datasets,
    are not a loader's); later calls change nothing."""
    for store in _RETRY_METRIC:
        now = store_retries(store)
        with _retry_lock:
            _retries_taken.setdefault(store, now)


def _take_retries(store: str) -> int:
    """The retries of a store kind counted since the last take (each retry is handed out once)."""
    now = store_retries(store)
    with _retry_lock:
        before = _retries_taken.get(store, now)
        _retries_taken[store] = now
    return max(0, now - before)


@dataclasses.dataclass(frozen=True)
class PendingRead:
    """One request in flight, for a stall report.

    Attributes:
      url: the object (its display name).
      start: first byte of the range.
      stop: end of the range (exclusive).
      age: seconds since the request was submitted.
      retries: retries of its store kind counted in this process since it was submitted.
      store: the store's name.
    """

    url: str
    start: int
    stop: int
    age: float
    retries: int
    store: str


@dataclasses.dataclass
class _Entry:
    read: Any  # object_store.requests.RangeRead
    store: str
    submitted: float
    retries_before: int


class PendingReads:
    """The requests in flight and the steps being read in this process (for stall reports).

    Registration is one dict insertion per object per call (no lock: single dict operations are
    atomic); `pending()` reads a snapshot. A pickled registry arrives empty (a worker process's
    requests are not visible from the training process).
    """

    def __init__(self) -> None:
        self._reads: dict[int, _Entry] = {}
        self.steps: dict[int, float] = {}  # step -> perf_counter() when its read began

    def __reduce__(self):
        return (PendingReads, ())

    def register(self, read: Any, store: str, submitted: float) -> None:
        """Enters `read` (a `RangeRead` with its futures) as submitted at `submitted`."""
        self._reads[id(read)] = _Entry(read, store, submitted, store_retries(store))

    def unregister(self, read: Any) -> None:
        """Removes `read` (answered, or failed)."""
        self._reads.pop(id(read), None)

    def pending(self, now: float | None = None) -> list[PendingRead]:
        """The requests not answered yet, oldest first."""
        now = time.perf_counter() if now is None else now
        entries = list(self._reads.values())  # one C call under the GIL: no other thread runs
        retries_now: dict[str, int] = {}
        out = []
        for entry in entries:
            spans = entry.read.unanswered()
            if not spans:
                continue
            if entry.store not in retries_now:
                retries_now[entry.store] = store_retries(entry.store)
            retries = max(0, retries_now[entry.store] - entry.retries_before)
            out.extend(
                PendingRead(entry.read.name, lo, hi, now - entry.submitted, retries, entry.store)
                for lo, hi in spans
            )
        out.sort(key=lambda p: -p.age)
        return out

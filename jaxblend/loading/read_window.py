"""Read-ahead that adapts: how many steps may be read ahead of the loader, grown while it waits.

A `ReadWindow` admits the read of step s once s < (steps taken by the loader) + size, so at most
`size` steps are being read or wait, read, for the loader; Grain's reader threads (as many as the
window may grow to) block in `admit` until their step is admitted. Steps are admitted in order of
their numbers, so the step the loader waits for is always admitted.

The size adapts to the consumer, once per step the loader takes (`taken`):

* the loader waited for the step (longer than `WAITED` and than `WAIT_SHARE` of the time since
  it took the previous one): the reads are behind, so the window grows by a quarter (at least one
  step), up to its bound;
* the loader did not wait for `2 x size` steps in a row: the window is more than the consumer
  needs, so it shrinks by one step, down to `low`.

The bound is `high` steps and `memory // step_bytes` (the bytes of one step's record, learnt from
the first step taken): read-ahead never holds more than `memory` bytes of records (at least one
step's). With the object store's request concurrency known, the window also grows no further
than the steps whose requests can be in flight at once (concurrency / requests per step, plus
one to keep the pipe full; never below the initial size): more steps would only queue their
requests, raising their latency without reading faster.
"""

from __future__ import annotations

import threading
import time

WAITED = 1e-3  # seconds: a wait shorter than this is the loader's own overhead, not a late read
WAIT_SHARE = 0.05  # nor is one shorter than this share of the step (Grain's hand-over under load)


class ReadWindow:
    """The adaptive read-ahead window of one loader stream (reads in this process's threads).

    Args:
      start: the first step of the stream (the first step admitted).
      size: the initial window, steps.
      low: the smallest window.
      high: the largest window (Grain's reader threads).
      memory: bytes the records read ahead may hold.
      concurrency: requests the object store client keeps in flight (None: no such bound).
    """

    def __init__(
        self, start: int, size: int, low: int, high: int, memory: int,
        concurrency: int | None = None,
    ) -> None:
        self._cond = threading.Condition()
        self._next = start  # the next step the loader takes
        self.low, self.high, self.memory = low, high, memory
        self.bound = high
        self.size = max(low, min(size, high))
        self.initial = self.size
        self.concurrency = concurrency
        self._requests = 0.0  # requests per step, a moving average
        self.peak = 0  # most steps admitted ahead of the loader at once
        self.step_bytes = 0
        self._calm = 0
        self._last = time.perf_counter()
        self._admitted = start - 1
        self._closed = False

    def admit(self, step: int) -> None:
        """Blocks until the read of `step` may start (or the window is closed)."""
        with self._cond:
            while step >= self._next + self.size and not self._closed:
                # a loader left open at exit: Python joins Grain's reader threads after the main
                # thread stops, so a blocked read must notice that itself
                if not self._cond.wait(0.5) and not threading.main_thread().is_alive():
                    break
            if step > self._admitted:
                self._admitted = step
                self.peak = max(self.peak, step - self._next + 1)

    def taken(self, step: int, waited: float, step_bytes: int, requests: int = 0) -> None:
        """The loader took `step` after waiting `waited` seconds; its record holds `step_bytes`
        and its read made `requests` object-store requests."""
        now = time.perf_counter()
        period, self._last = now - self._last, now
        with self._cond:
            self._next = step + 1
            if not self.step_bytes and step_bytes:
                self.step_bytes = step_bytes
                self.bound = max(self.low, min(self.high, self.memory // step_bytes))
            if requests and self.concurrency:
                self._requests = requests if not self._requests else (
                    0.8 * self._requests + 0.2 * requests)
            if waited > max(WAITED, WAIT_SHARE * period):
                self.size = min(self._growth_bound(), self.size + max(1, self.size // 4))
                self._calm = 0
            else:
                self._calm += 1
                if self._calm >= 2 * self.size:
                    self.size = max(self.low, self.size - 1)
                    self._calm = 0
            self.size = min(self.size, self.bound)
            self._cond.notify_all()

    def _growth_bound(self) -> int:
        """How far a wait may grow the window: the memory bound and, with a known request
        concurrency, the steps whose requests fit in flight at once."""
        if not self._requests or not self.concurrency:
            return self.bound
        fits = int(self.concurrency / self._requests) + 1
        return min(self.bound, max(self.initial, fits))

    @property
    def ahead(self) -> int:
        """Steps admitted and not yet taken by the loader."""
        return max(0, self._admitted - self._next + 1)

    def close(self) -> None:
        """Lets every blocked read go (the stream ended or the loader closed)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

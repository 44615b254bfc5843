"""Read-ahead that adapts: how many steps may be read ahead of the loader.

A `ReadWindow` admits the read of step s once s < (steps taken by the loader) + size (`limit`),
so at most `size` steps are being read or wait, read, for the loader. The reads run in a
`jaxblend.loading.read_pool.ReadPool`, which follows the window (`watch`): it starts a step's
read only once the window admits it, with no more reader threads than the window holds steps, so a
window that shrinks also ends readers. Steps are admitted in order of their numbers, so the step
the loader waits for is always admitted. A window whose `low` and `high` equal its size never
changes: the fixed read-ahead.

The size adapts to the consumer, once per step the loader takes (`taken`), starting from the
fixed read-ahead (so it is never behind it at the start):

* **Grow fast, and keep only what helps.** The loader waited for a step (longer than `WAITED` and
  than `WAIT_SHARE` of the time since it took the previous one), it waited `WAIT_SHARE` of its
  time or more over the window's last steps (not one late step alone), and the window holds
  fewer than `BEHIND` x the steps one read spans at the loader's pace (Little's law: the mean
  time a step takes to read / the mean time between steps, plus one; a larger window is already
  ahead of its reads, so the waits come from elsewhere): the window doubles, up to its bound, on
  trial. The steps already in flight are passed, then as many steps as the new window are
  measured: the larger window is kept if the share of time the loader waited fell by
  `WAIT_SHARE` or more, to below `KEEP_SHARE` of its share before or below `WAIT_SHARE`;
  otherwise the reads were limited by something more steps do not fix (the store's request rate,
  the CPU) and the window returns to its size before, which becomes a ceiling for
  `RETRY_STEPS` steps. During a trial the window neither grows nor shrinks.
* **Shrink slowly, never below what the consumer needs.** After as many steps without a wait as
  the window is large, it shrinks by one step, down to `HEADROOM` x the steps one read spans
  at the consumer's pace, plus one, and at least `low`. A slow consumer thus holds fewer steps
  than the fixed window, at the same (near-zero) wait. A wait after shrinking below a window a
  trial kept doubles the window back towards it, without a trial.

The bound is `high` steps and `memory // step_bytes` (the bytes of the largest step record taken
so far): read-ahead never holds more than `memory` bytes of records (at least one step's; the
first window is admitted before a step's size is known). With the object store's request
concurrency known, the window also grows no further than the steps whose requests can be in
flight at once (concurrency / requests per step, plus one to keep the pipe full; never below the
initial size): more steps would only queue their requests.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable

WAITED = 1e-3  # seconds: a wait shorter than this is the loader's own overhead, not a late read
WAIT_SHARE = 0.05  # nor is one shorter than this share of the step (Grain's hand-over under load)
KEEP_SHARE = 0.75  # a grown window is kept when the wait share fell below this share of before
RETRY_STEPS = 256  # steps a window that did not help stays the ceiling
HEADROOM = 2.0  # the smallest window covers this many times the steps a read spans
BEHIND = 1.5  # a wait grows a window smaller than this many times the steps a read spans
SMOOTHING = 0.2  # weight of the newest figure in the moving averages


class ReadWindow:
    """The read-ahead window of one loader stream (reads in this process's threads).

    Args:
      start: the first step of the stream (the first step admitted).
      size: the initial window, steps.
      low: the smallest window.
      high: the largest window.
      memory: bytes the records read ahead may hold.
      concurrency: requests the object store client keeps in flight (None: no such bound).
      clock: seconds, for the time between steps taken (a monotonic clock).
    """

    def __init__(
        self, start: int, size: int, low: int, high: int, memory: int,
        concurrency: int | None = None, clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._watchers: list[Callable[[int, int], None]] = []
        self._start = start
        self._next = start  # the next step the loader takes
        self.low, self.high, self.memory = low, high, memory
        self.bound = high
        self.size = max(low, min(size, high))
        self.initial = self.size
        self.concurrency = concurrency
        self._requests = 0.0  # requests per step, a moving average
        self._read = 0.0  # seconds one step's read takes, a moving average
        self._period = 0.0  # seconds between steps taken, a moving average
        self._recent: collections.deque[tuple[float, float]] = collections.deque(maxlen=high)
        self._trial: _Trial | None = None
        self._kept = self.size  # the largest window a trial kept (or the initial one)
        self.ceiling = high
        self._ceiling_until = start
        self.step_bytes = 0
        self._calm = 0
        self._last = clock()
        self._admitted = start - 1

    @property
    def limit(self) -> int:
        """The first step whose read may not start yet (the window admits the steps before)."""
        with self._lock:
            return self._next + self.size

    def watch(self, callback: Callable[[int, int], None]) -> None:
        """Calls `callback(limit, size)` now and after every step taken, in the thread that took
        it and under the window's lock (so the calls come in order): the callback must not call
        the window."""
        with self._lock:
            self._watchers.append(callback)
            callback(self._next + self.size, self.size)

    def begun(self, step: int) -> None:
        """The read of the admitted `step` began (for `ahead`)."""
        with self._lock:
            self._admitted = max(self._admitted, step)

    def read(self, seconds: float) -> None:
        """An admitted step's read took `seconds`."""
        with self._lock:
            self._read = _average(self._read, seconds)

    def taken(self, step: int, waited: float, step_bytes: int, requests: int = 0) -> None:
        """The loader took `step` after waiting `waited` seconds; its record holds `step_bytes`
        and its read made `requests` object-store requests."""
        now = self._clock()
        period, self._last = now - self._last, now
        with self._lock:
            self._next = step + 1
            if step_bytes > self.step_bytes:
                self.step_bytes = step_bytes
                self.bound = max(self.low, min(self.high, self.memory // step_bytes))
            if requests and self.concurrency:
                self._requests = _average(self._requests, requests)
            if step > self._start:  # the first period is the stream's start, not a step
                self._period = _average(self._period, period)
            late = waited > max(WAITED, WAIT_SHARE * period)
            self._recent.append((waited, period))
            if step >= self._start + self.initial:  # the first window is the pipe filling
                self._adapt(step, late, waited, period)
            self.size = min(self.size, self.bound)
            for callback in self._watchers:
                callback(self._next + self.size, self.size)

    def _adapt(self, step: int, late: bool, waited: float, period: float) -> None:
        """One step's change of the window (under the lock)."""
        if step >= self._ceiling_until:
            self.ceiling = self.high
        if self._trial is not None:
            if self._trial.add(waited, period):
                trial, self._trial = self._trial, None
                if trial.helped():
                    self._kept = trial.size
                else:
                    self.size = self.ceiling = trial.before
                    self._ceiling_until = step + RETRY_STEPS
            return
        if late:
            self._calm = 0
            if self.size < self._kept:  # shrunk too far: back towards the window that served
                self.size = min(self._kept, 2 * self.size)
                return
            grown = min(self._growth_bound(), max(self.size + 1, 2 * self.size))
            waiting = _share(self._recent, self.size) >= WAIT_SHARE  # not one late step alone
            if grown > self.size and waiting and self.reads_behind:
                self._trial = _Trial(self.size, grown, _share(self._recent, self.size))
                self.size = grown
            return
        self._calm += 1
        if self._calm >= self.size:
            self._calm = 0
            self.size = max(min(self.floor, self.size), self.size - 1)

    @property
    def reads_behind(self) -> bool:
        """Whether the window is too small for the reads (so a larger one may help): it holds
        fewer than `BEHIND` x the steps one read spans at the loader's pace, plus one (True when
        no read was timed yet)."""
        if not self._read or not self._period:
            return True
        return self.size < BEHIND * self._read / self._period + 1

    @property
    def floor(self) -> int:
        """The smallest window the consumer's pace allows: the steps a read spans, with room."""
        if not self._read or not self._period:
            return self.low
        return max(self.low, math.ceil(HEADROOM * self._read / self._period) + 1)

    def _growth_bound(self) -> int:
        """How far a wait may grow the window: the memory bound, the ceiling a trial left and,
        with a known request concurrency, the steps whose requests fit in flight at once."""
        bound = min(self.bound, self.ceiling)
        if not self._requests or not self.concurrency:
            return bound
        fits = int(self.concurrency / self._requests) + 1
        return min(bound, max(self.initial, fits))

    @property
    def ahead(self) -> int:
        """Steps whose reads began and that the loader has not taken yet."""
        return max(0, self._admitted - self._next + 1)


class _Trial:
    """A grown window on trial: the loader's waits over its steps against those before it."""

    def __init__(self, before: int, size: int, share_before: float) -> None:
        self.before, self.size, self.share_before = before, size, share_before
        self._skip = before  # the steps in flight before the growth tell nothing of it
        self._steps, self._waited, self._elapsed = 0, 0.0, 0.0

    def add(self, waited: float, period: float) -> bool:
        """Counts one step; True when the trial is over."""
        self._steps += 1
        if self._steps > self._skip:
            self._waited += waited
            self._elapsed += period
        return self._steps >= self._skip + self.size

    def helped(self) -> bool:
        """Whether the loader waited a smaller share of its time with the grown window."""
        share = self._waited / self._elapsed if self._elapsed else 0.0
        fell = self.share_before - share >= WAIT_SHARE  # by more than the noise of a loaded host
        return fell and (share < WAIT_SHARE or share < KEEP_SHARE * self.share_before)


def _share(recent: collections.deque[tuple[float, float]], steps: int) -> float:
    """The share of the time the loader waited over the last `steps` steps."""
    last = list(recent)[-steps:]
    elapsed = sum(period for _, period in last)
    return sum(waited for waited, _ in last) / elapsed if elapsed else 0.0


def _average(mean: float, value: float) -> float:
    """A moving average's next value (the first value as it is)."""
    return value if not mean else (1 - SMOOTHING) * mean + SMOOTHING * value

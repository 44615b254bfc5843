"""A reader pool that grows and shrinks with the read-ahead window.

`ReadPool` reads the steps of a stream ahead of the loader in threads and hands their records
over in step order. It follows an `Admission` (a `ReadWindow`, adaptive or fixed): a step's
read starts only once the window admits it, and the pool runs no more reader threads than the
window holds steps. A reader starts when a step is admitted and no reader is free (and the window has room
for one more); a reader leaves when the window holds fewer steps than there are readers, at once
when it is idle, after its read otherwise. So a window of 8 steps runs at most 8 readers, one
grown to 32 runs up to 32, and one shrunk to 2 ends all but 2. Readers also leave once every
step of the stream has been taken by a reader, when the pool is closed, and (idle ones, within
half a second) when the main thread has ended: they are ordinary threads like Grain's, so a read
in progress at exit finishes rather than being cut off inside native code.

Grain's reader pool (`grain.ReadOptions`) has a fixed number of threads and prefetch slots, so
a window that may grow to 32 steps needed 32 threads all the time, most of them blocked waiting
for admission (which cost a fast loop tokens/s, BENCHMARKS.md "Adaptive read-ahead"). The fixed
read-ahead is the same pool over a window that never changes; worker processes read through Grain.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")


class Admission(Protocol):
    """What a `ReadPool` follows: which steps may be read now, and how many at once."""

    def watch(self, callback: Callable[[int, int], None]) -> None:
        """Calls `callback(limit, size)` now and after every change, in order: steps before
        `limit` may be read; `size`, the steps the window holds, bounds the readers. The callback
        runs under the admission's lock and does not call it back."""


class ReadPool(Iterator[T]):
    """Records of steps `[start, end)` read ahead in threads that follow an `Admission`.

    `next(pool)` returns the record of the next step in order (waiting for its read), or
    re-raises the exception its read raised; reads begin at the first `next` or at
    `start_prefetch`, whichever comes first.

    Args:
      read: reads one step's record (called in the reader threads, one step per call).
      start: the first step.
      end: the step the stream ends at (exclusive).
      admission: the window the reads follow.
    """

    def __init__(
        self, read: Callable[[int], T], start: int, end: int, admission: Admission
    ) -> None:
        self._read = read
        self._end = end
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # idle readers wait for an admitted step
        self._ready = threading.Condition(self._lock)  # the consumer waits for its step's record
        self._next = start  # the step `next` returns
        self._unread = start  # the next step a reader takes
        self._limit = start  # steps before it are admitted
        self._size = 1
        self._records: dict[int, tuple[bool, T | BaseException]] = {}
        self._threads = 0  # live readers
        self._idle = 0  # readers waiting for work
        self.most_threads = 0
        self._started = False
        self._closed = False
        admission.watch(self._follow)

    @property
    def threads(self) -> int:
        """Live reader threads."""
        with self._lock:
            return self._threads

    def start_prefetch(self) -> None:
        """Starts the reads of the admitted steps now (idempotent)."""
        with self._lock:
            if not self._started and not self._closed:
                self._started = True
                self._staff()

    def __next__(self) -> T:
        self.start_prefetch()
        with self._lock:
            step = self._next
            if step >= self._end or self._closed:
                raise StopIteration
            while step not in self._records:
                self._ready.wait()
                if self._closed:
                    raise StopIteration
            ok, record = self._records.pop(step)
            self._next = step + 1
        if not ok:
            raise record
        return record

    def close(self) -> None:
        """Ends the readers (a read in progress finishes first, its record is dropped) and the
        stream: `next` raises `StopIteration`."""
        with self._lock:
            self._closed = True
            self._records.clear()
            self._work.notify_all()
            self._ready.notify_all()

    def _follow(self, limit: int, size: int) -> None:
        """The admission changed: start or wake readers for the steps it admits, let the readers
        beyond its size go."""
        with self._lock:
            self._limit, self._size = limit, size
            if self._started and not self._closed:
                self._staff()

    def _staff(self) -> None:
        """Matches the readers to the admitted steps no reader took (under the lock): wakes idle
        readers for them, starts new ones while the window has room, wakes the idle readers
        beyond the window's size so that they leave."""
        waiting = max(0, min(self._limit, self._end) - self._unread)
        wake = min(waiting, self._idle)
        beyond = max(0, min(self._threads - self._size, self._idle - wake))
        if wake + beyond:
            self._work.notify(wake + beyond)
        for _ in range(max(0, min(waiting - wake, self._size - self._threads))):
            # Counted once started (it waits for the lock held here), so a thread that cannot be
            # started leaves no phantom reader behind: its error reaches the caller.
            threading.Thread(target=self._reader, name="jaxblend-read").start()
            self._threads += 1
            self.most_threads = max(self.most_threads, self._threads)

    def _reader(self) -> None:
        """One reader thread: reads admitted steps until the pool closes, every step is taken by
        a reader, the pool holds more readers than the window holds steps, or the main thread
        ended (a loader left open at exit: Python joins the readers then, so an idle one must
        notice)."""
        with self._lock:
            try:
                while not self._closed and self._threads <= self._size and self._unread < self._end:
                    if self._unread < min(self._limit, self._end):
                        step = self._unread
                        self._unread += 1
                        self._lock.release()
                        try:
                            outcome: tuple[bool, T | BaseException] = (True, self._read(step))
                        except BaseException as error:  # noqa: BLE001 - re-raised by `next`
                            outcome = (False, error)
                        finally:
                            self._lock.acquire()
                        if not self._closed:
                            self._records[step] = outcome
                            if step == self._next:
                                self._ready.notify()
                    elif threading.main_thread().is_alive():
                        self._idle += 1  # counted until it runs again, woken or not
                        self._work.wait(0.5)
                        self._idle -= 1
                    else:
                        break
            finally:
                self._threads -= 1
                if not self._closed:  # a reader woken for a step that left instead
                    self._staff()

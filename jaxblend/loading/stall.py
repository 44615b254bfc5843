"""Stall reports: when the consumer has waited too long for a batch, one line says what is pending.

A `StallWatch` is a daemon thread per loader. The loader marks when it starts and stops waiting
for a step (two attribute writes per step); the thread looks every fraction of the threshold and,
once the wait reaches `threshold` seconds, writes one line (a WARNING of the
`jaxblend.loading` logger) naming the step awaited, the requests still in flight in this
process (how many, and the oldest: URL, byte range, age, retries so far) and the steps being
read; it writes it again every `threshold` seconds while the wait lasts. The loader goes on
waiting: a report never interrupts the run. docs/telemetry.md shows how to read one.
"""

from __future__ import annotations

import logging
import threading
import time

from jaxblend.loading.telemetry import LoaderCounters
from jaxblend.storage.read_tally import PendingReads

logger = logging.getLogger("jaxblend.loading")
SHOWN = 3  # oldest requests named in a line


class StallWatch:
    """Writes a stall report while the consumer waits longer than `threshold` for a batch.

    Args:
      threshold: seconds of waiting before the first line, and between lines.
      pending: the requests in flight and steps being read (`PendingReads`).
      worker_count: Grain worker processes reading (their requests are not visible here).
      counters: the loader's figures, whose stall count each line adds to (the watch holds no
        reference to the loader, so a loader dropped without `close` is collected and its watch
        stopped).
    """

    def __init__(
        self,
        threshold: float,
        pending: PendingReads,
        worker_count: int = 0,
        counters: LoaderCounters | None = None,
    ) -> None:
        self.threshold = threshold
        self.pending = pending
        self.worker_count = worker_count
        self.counters = counters
        self._since: float | None = None
        self._step = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jaxblend-stall-watch", daemon=True)
        self._thread.start()

    def begin(self, step: int) -> None:
        """The consumer starts waiting for `step`."""
        self._step = step
        self._since = time.perf_counter()

    def end(self) -> None:
        """The wait is over."""
        self._since = None

    def stop(self) -> None:
        """Ends the thread (the loader closed or was collected)."""
        self._stop.set()

    def _run(self) -> None:
        poll = min(self.threshold / 4, 1.0)
        reported_at: float | None = None
        waiting_since: float | None = None
        while not self._stop.wait(poll):
            since = self._since
            if since is None or since != waiting_since:
                waiting_since, reported_at = since, None
            if since is None:
                continue
            now = time.perf_counter()
            due = since + self.threshold if reported_at is None else reported_at + self.threshold
            if now >= due:
                reported_at = now
                if self.counters is not None:
                    self.counters.add_stall()
                logger.warning("%s", self.line(self._step, now - since, now))

    def line(self, step: int, waited: float, now: float | None = None) -> str:
        """The report: the step awaited, the requests in flight (oldest first), steps being read."""
        now = time.perf_counter() if now is None else now
        reads = self.pending.pending(now)
        text = f"loader stalled: step {step} not ready after {waited:.1f} s; "
        if reads:
            shown = "; ".join(
                f"{r.url} bytes [{r.start}, {r.stop}) for {r.age:.1f} s, {r.retries} "
                f"{r.store} retries since" for r in reads[:SHOWN]
            )
            more = f" (and {len(reads) - SHOWN} more)" if len(reads) > SHOWN else ""
            text += f"{len(reads)} requests pending, oldest: {shown}{more}"
        elif self.worker_count:
            text += (
                f"reads run in {self.worker_count} Grain worker processes, whose requests are not "
                "visible here"
            )
        else:
            text += "no object-store request pending"
        steps = sorted(self.pending.steps.copy().items())
        if steps:
            text += "; steps being read: " + ", ".join(
                f"{k} ({now - t:.1f} s)" for k, t in steps[:8]
            ) + (f" (and {len(steps) - 8} more)" if len(steps) > 8 else "")
        return text

"""Multi-process fault detection: a lost or failed peer stops every process with one clear line.

Without it, a process whose peer died sits in the next collective until a transport timeout, then
dies with a raw traceback that names no process. `PeerWatch` runs a heartbeat thread and a monitor
thread in every process of a `jax.distributed` run, over the key-value store of JAX's
coordination service (single-process runs do not start it); a failing process tells the others
through the same store (`report_failure`, `failures_reported`). The rules (staleness judged up to
this host's last completed round, the confirming round, exit code `LOST_PEER_EXIT`, the messages)
are in docs/pod.md, "Faults". JAX's own heartbeat timeout (`--distributed_timeout`) should be
longer than `timeout`, so that this clear message comes first.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from absl import logging

from jaxblend.validation import require_positive

LOST_PEER_EXIT = 75
_PREFIX = "jaxblend/peer_watch"


class KeyValueClient(Protocol):
    """The part of JAX's coordination-service client the watch uses."""

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None: ...

    def key_value_dir_get(self, key: str) -> list[tuple[str, str]]: ...

    def wait_at_barrier(self, barrier_id: str, timeout_in_ms: int) -> None: ...


def _client() -> KeyValueClient | None:
    from jax._src import distributed as jax_distributed

    return jax_distributed.global_state.client


def _die(line: str) -> None:
    print(f"error: {line}", file=sys.stderr, flush=True)
    os._exit(LOST_PEER_EXIT)


class PeerWatch:
    """Heartbeats between the processes of one run; see the module docstring.

    Args:
      timeout: seconds without a heartbeat after which a peer counts as lost.
      interval: seconds between heartbeats (default: a fifth of `timeout`, at most 1 s).
      on_fatal: called with the message when this process must stop (default: print, `os._exit`).
      client: the key-value store (default: JAX's, when `jax.distributed` is initialized).
      process_index: this process (default: `jax.process_index()`).
      process_count: processes in the run (default: `jax.process_count()`).
    """

    def __init__(
        self,
        timeout: float,
        interval: float | None = None,
        on_fatal: Callable[[str], None] = _die,
        *,
        client: KeyValueClient | None = None,
        process_index: int | None = None,
        process_count: int | None = None,
    ) -> None:
        require_positive("--peer_timeout", timeout)
        self.timeout = float(timeout)
        self.interval = float(interval or min(1.0, timeout / 5))
        self.step = 0
        self._phase = "starting"
        self._phase_changed = threading.Event()  # wakes the heartbeat: a new phase is told at once
        self._on_fatal = on_fatal
        if process_index is None or process_count is None:
            import jax

            process_index, process_count = jax.process_index(), jax.process_count()
        self._pid = process_index
        self._count = process_count
        self._client = (client or _client()) if self._count > 1 else None
        self._stop = threading.Event()
        self._fired = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = self._last_contact = time.monotonic()
        self._seen: dict[int, tuple[str, float]] = {}
        self._rounds = 0

    @property
    def phase(self) -> str:
        """What this process is doing, as its heartbeat tells the peers."""
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        # Told at once, not at the next interval: a short phase (the first steps after a compile
        # done beforehand) is what a peer's "lost process K ... (while <phase>)" line must name.
        self._phase = value
        self._phase_changed.set()

    @property
    def active(self) -> bool:
        """Whether the watch runs (a multi-process run with a coordination service)."""
        return self._client is not None

    def start(self) -> PeerWatch:
        """Starts the threads (no-op in a single-process run); returns self."""
        if not self.active or self._threads:
            return self
        self._started = self._last_contact = time.monotonic()
        for target in (self._beat, self._monitor):
            t = threading.Thread(target=target, name=f"peer-watch-{target.__name__}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        """Stops watching (call once every process is past its last collective)."""
        self._stop.set()
        self._phase_changed.set()

    def report_failure(self, message: str) -> None:
        """Tells every peer that this process failed with `message` (best effort).

        Process 0 (the coordinator, which holds the key-value store) then waits two heartbeat
        intervals, so that the peers read it before it exits; another process returns at once
        (lingering would let JAX abort it when the peers it told exit).
        """
        if not self.active or self._fired.is_set():
            return
        line = " ".join(message.split())[:500]
        try:
            self._client.key_value_set(
                f"{_PREFIX}/failed/{self._pid}", f"{self.phase}\t{line}", allow_overwrite=True
            )
        except Exception as err:  # noqa: BLE001 - the coordinator may be gone already
            logging.warning("could not report this process's failure to its peers: %s", err)
            return
        if self._pid == 0:
            time.sleep(2 * self.interval)

    def wait_for_peers(self, name: str, timeout: float) -> None:
        """Waits until every process calls this with `name` (no-op in a single-process run).

        The wait is the coordination service's barrier, bounded by `timeout` seconds (a lost or
        failed peer stops this process sooner, through the monitor). A job's processes enter
        their first collective together after it: XLA's CPU collectives (Gloo) give a process 30
        s to wait for its peers to join a collective's first run, and one process may reach it
        far sooner than another (e.g. it found its steps in JAX's persistent compilation cache,
        which only process 0 writes, while its peers compile theirs).
        """
        if not self.active:
            return
        self._client.wait_at_barrier(f"{_PREFIX}/barrier/{name}", int(timeout * 1000))

    def wait_for_verdict(self) -> None:
        """After a collective failed: gives the monitor `timeout` seconds to name a lost peer."""
        if not self.active or self._stop.is_set():
            return
        self._fired.wait(self.timeout + 2 * self.interval)

    def _fatal(self, line: str) -> None:
        if self._fired.is_set() or self._stop.is_set():
            return
        self._fired.set()
        self._on_fatal(line)

    def _beat(self) -> None:
        counter = 0
        while not self._stop.is_set():
            counter += 1
            try:
                self._client.key_value_set(
                    f"{_PREFIX}/beat/{self._pid}", f"{counter} {self.step} {self.phase}",
                    allow_overwrite=True,
                )
                beats = self._client.key_value_dir_get(f"{_PREFIX}/beat/")
                failures = self._client.key_value_dir_get(f"{_PREFIX}/failed/")
            except Exception as err:  # noqa: BLE001 - judged by the monitor's timeout
                logging.log_every_n_seconds(
                    logging.WARNING, "peer watch: coordination service error: %s", 10, err
                )
                self._stop.wait(self.interval)
                continue
            now = time.monotonic()
            if now - self._last_contact > max(5.0, self.timeout / 4):
                logging.warning(
                    "peer watch: no heartbeat round for %.1f s (this process was busy)",
                    now - self._last_contact,
                )
            for key, value in beats:
                pid = int(key.rstrip("/").rsplit("/", 1)[-1])
                if self._seen.get(pid, ("",))[0] != value:
                    self._seen[pid] = (value, now)
            self._last_contact = now
            self._rounds += 1
            for key, value in failures:
                pid = int(key.rstrip("/").rsplit("/", 1)[-1])
                if pid != self._pid:
                    phase, _, message = value.partition("\t")
                    self._fatal(f"process {pid} failed while {phase}: {message}")
            self._phase_changed.wait(self.interval)  # the interval, or a new phase
            self._phase_changed.clear()

    def _verdict(self) -> str | None:
        """Why this process must stop, judged on the data of the last heartbeat round, or None."""
        now = time.monotonic()
        if now - self._last_contact > self.timeout:
            return (
                f"lost process 0 (the coordinator) at step {self.step}: no answer from it for "
                f"{now - self._last_contact:.0f} s (--peer_timeout={self.timeout:g}); stopping "
                f"process {self._pid}"
            )
        for pid in range(self._count):
            if pid == self._pid:
                continue
            value, since = self._seen.get(pid, ("0 0 starting", self._started))
            # Staleness up to our last completed round: if this process was starved of CPU (or
            # of the GIL), its own rounds are late too, and a live peer is not declared lost.
            if self._last_contact - since > self.timeout:
                _, step, phase = (value.split(" ", 2) + ["", ""])[:3]
                return (
                    f"lost process {pid} at step {step} (while {phase}): no heartbeat for "
                    f"{self._last_contact - since:.0f} s (--peer_timeout={self.timeout:g}); "
                    f"stopping process {self._pid} at step {self.step}"
                )
        return None

    def _monitor(self) -> None:
        while not self._stop.wait(self.interval):
            if self._verdict() is None:
                continue
            # Confirm on a fresh round: the heartbeat thread may just not have run for a while.
            seen_round = self._rounds
            deadline = time.monotonic() + self.timeout / 2
            while self._rounds == seen_round and time.monotonic() < deadline:
                if self._stop.wait(0.05):
                    return
            verdict = self._verdict()
            if verdict is not None:
                self._fatal(verdict)
                return


@contextlib.contextmanager
def failures_reported(watch: PeerWatch, phase: str, verbose: bool = False) -> Iterator[None]:
    """Runs a block as `phase`; if it raises in a multi-process run, the job stops with its error.

    A collective that failed because a peer died first gives the monitor time to name that peer.
    Otherwise the error is told to the peers (they stop with `process K failed while <phase>`),
    printed like any CLI failure (with its traceback if `verbose`), and this process exits at
    once: JAX's exit-time shutdown barrier would otherwise wait for peers that are gone.
    """
    watch.phase = phase
    try:
        yield
    except Exception as err:
        if not watch.active:
            raise
        if type(err).__name__ == "JaxRuntimeError":
            watch.wait_for_verdict()
        from jaxblend import errors

        watch.report_failure(errors.error_line(err).removeprefix("error: "))
        watch.stop()
        os._exit(errors.print_failure(err, verbose))

"""Grain worker processes from any script: what `make_loader` (and a `grain.DataLoader` over
jaxblend sources) needs so that ``worker_count > 0`` works in a plain Python script.

Three things stand between a script and Grain's worker processes (grain 0.2):

* **An absl flag read before parsing.** When it starts a worker, Grain reads its own flag
  ``--grain_enable_multiprocess_worker_profiling`` in the parent without a fallback, and absl
  refuses to read any flag before the command line is parsed: a script that never runs
  ``absl.app.run`` stops with ``UnparsedFlagAccessError``. Grain's other options fall back to
  their defaults in that case (``grain.config.get_or_default``); `default_grain_flags` gives this
  one the same fallback by marking that single Grain flag as given at its current value, and only
  while absl flags are unparsed. Nothing else changes: a later ``app.run`` or ``FLAGS(argv)``
  still parses the command line (and may set the flag), and a program whose flags are parsed is
  not touched. jaxblend reads no flag.
* **Spawned workers import the main module again.** Grain starts workers with ``spawn``: each one
  runs the script's top-level code once more, so that code must sit under
  ``if __name__ == "__main__":``. Without it the worker would run the script (open the data,
  build a loader, try to start workers of its own) and die with a page of multiprocessing
  errors; `refuse_unguarded_main` stops it at once with one line saying what to write.
* **Shared memory.** A worker sends each batch back in POSIX shared memory blocks, unlinked when
  the parent's arrays are freed. Grain keeps the last batch of each reader thread alive in a
  reference cycle (the thread's frame, in the traceback of the exception that ended it), so at
  exit Python's resource tracker reports them as leaked. `release` frees that garbage when a
  loader stops; at exit, loaders still open are closed (`track`) and every stopped pipeline's
  garbage is freed (`release_at_exit`), a `grain.DataLoader` of the user's over jaxblend sources
  included. That exit handler collects garbage only in a process that handed data to Grain
  workers (`handed_to_workers`: a loader with workers, a source pickled for a worker); any other
  process exits without a full collection.

`prepare` (Grain's flag default and the release at exit) runs where jaxblend hands data to Grain:
`make_loader` with workers and `jaxblend.open_gpt_sources`; `refuse_unguarded_main` runs in
`make_loader` and where a source is pickled for a worker (`GPTSource`, whichever its span
index), which also notes `handed_to_workers`, as `track` does for a loader with workers.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
import threading
import time
import weakref
from typing import Protocol

GRAIN_PROFILING_FLAG = "grain_enable_multiprocess_worker_profiling"
GUARD_HELP = (
    "a Grain worker process ran this script's top-level code: Grain starts workers with 'spawn', "
    "which imports the main module again; put the script's code under "
    "`if __name__ == \"__main__\":` (README, \"Grain worker processes\")"
)


def prepare() -> None:
    """Readies this process to start Grain workers: `default_grain_flags`, `release_at_exit`."""
    default_grain_flags()
    release_at_exit()


def default_grain_flags() -> None:
    """Lets Grain read ``--grain_enable_multiprocess_worker_profiling`` before absl flags are
    parsed: marks that flag as given at its current value (its default) while they are unparsed.

    A no-op once flags are parsed, when the flag is already given, or when Grain defines no such
    flag (another Grain version).
    """
    from absl import flags

    if flags.FLAGS.is_parsed() or GRAIN_PROFILING_FLAG not in flags.FLAGS:
        return
    flag = flags.FLAGS[GRAIN_PROFILING_FLAG]
    if not flag.present:
        flag.present = 1


def _in_spawned_main_import() -> bool:
    """True while a spawned child process runs the main script's top-level code again.

    `multiprocessing` runs the script in a spawned child as module ``__mp_main__``, registered in
    `sys.modules` while it runs; only once it has finished does ``__main__`` become that module.
    The test holds in every thread of the process (Grain starts workers from threads). Only a
    process that `multiprocessing` started counts: in any process, importing `multiprocessing`
    registers ``__mp_main__`` as the ``__main__`` of that moment, which a program run through
    `runpy` (``python -m``, a wrapper script) later replaces.
    """
    running = sys.modules.get("__mp_main__")
    if running is None or running is sys.modules.get("__main__"):
        return False
    import multiprocessing

    # While a spawned child imports the main module, multiprocessing marks its process object as
    # inheriting (the flag behind its own "bootstrapping phase" error); afterwards it has a parent.
    child = multiprocessing.current_process()
    return bool(getattr(child, "_inheriting", False)) or multiprocessing.parent_process() is not None


def refuse_unguarded_main() -> None:
    """Stops a spawned worker process that is running the main script's top-level code, with one
    line (`GUARD_HELP`) on its stderr and exit status 1; the parent then reports the worker's exit.

    Raises:
      SystemExit: called from the worker's main thread. From another thread (Grain pickles a
        worker's dataset in one) the process exits at once: a thread's SystemExit would only end
        that thread and leave the worker hanging.
    """
    if not _in_spawned_main_import():
        return
    message = f"error: {GUARD_HELP}"
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(message)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(1)


class _Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet = weakref.WeakSet()  # loaders whose Grain pipeline has workers
_workers_fed: list[bool] = []  # whether this process handed data to Grain workers


@functools.cache  # registers the handler once
def release_at_exit() -> None:
    """At interpreter exit, closes the loaders still open (`track`) and frees the batches of
    stopped pipelines (`release`), before multiprocessing's exit handlers (registered earlier, so
    run later) and the resource tracker."""
    atexit.register(_at_exit)


def handed_to_workers() -> None:
    """Notes that this process hands data to Grain worker processes, so that the exit handler
    (`release_at_exit`) frees the shared memory of their batches; without this note it does
    nothing (no worker ran: no block to unlink, no garbage collection at exit)."""
    if not _workers_fed:
        _workers_fed.append(True)


def track(loader: _Closable) -> None:
    """Closes ``loader`` at interpreter exit if it is still open then (`release_at_exit`)."""
    release_at_exit()
    handed_to_workers()
    _open.add(loader)


def untrack(loader: _Closable) -> None:
    """Forgets ``loader`` (it was closed)."""
    _open.discard(loader)


def release() -> None:
    """Frees the batches a stopped Grain pipeline still holds in reference cycles and waits until
    their shared memory blocks are unlinked.

    Grain unlinks a block when its array is freed, on a thread pool of its own when one is running
    (``SharedMemoryArray.enable_async_del``, one thread, kept in the class attribute
    ``_del_thread_pool``); a no-op task queued behind the unlinks returns once they are done.
    """
    gc.collect()
    if "grain" not in sys.modules:  # no Grain pipeline ran: nothing to wait for (and no import)
        return
    from grain.multiprocessing import SharedMemoryArray

    pool = getattr(SharedMemoryArray, "_del_thread_pool", None)
    if pool is not None:
        with contextlib.suppress(ValueError):  # a pool shut down already has nothing queued
            pool.apply(int)


GRAIN_THREAD_PREFIX = "grain-"
"""Grain names its reader threads ``grain-thread-prefetch-*`` and ``grain-prefetch_*``."""


def _join_grain_threads(timeout: float) -> None:
    """Waits (at most `timeout` seconds in all) for Grain's reader threads to end.

    A reader thread that is still winding down when its pipeline stops keeps its last batch
    reachable from its frame, so `release` cannot free it yet; at exit every pipeline has stopped,
    so each such thread ends promptly and its batch becomes garbage.
    """
    deadline = time.monotonic() + timeout
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and thread.name.startswith(
            GRAIN_THREAD_PREFIX
        ):
            thread.join(max(0.0, deadline - time.monotonic()))


def _at_exit() -> None:
    if not _workers_fed:  # no Grain worker ran here: no shared memory to free
        return
    for loader in list(_open):
        loader.close()
    _join_grain_threads(timeout=10.0)
    release()

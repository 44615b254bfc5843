"""Worker processes end with the process that started them, even when it is killed with ``kill -9``.

A killed driver runs no cleanup, so without this its pool workers (and, through them, the
multiprocessing resource tracker) would live on as orphans. On Linux the kernel delivers SIGKILL
to the worker when its parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon thread polls
the parent's pid.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.5


def _set_pdeathsig() -> bool:
    """Asks Linux for SIGKILL when the parent dies; False when that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_POLL_SECONDS)
    os._exit(1)


def die_with_parent(parent_pid: int) -> None:
    """Ends this process when ``parent_pid`` (the process that started it) ends.

    Args:
      parent_pid: the parent's pid as the parent saw it (``os.getpid()`` there), so that a parent
        that died before this call is noticed too.
    """
    if not _set_pdeathsig():
        threading.Thread(target=_watch, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to watch it
        os._exit(1)

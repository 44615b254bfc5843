"""Ending a tool's process once its work is done, without the interpreter's teardown.

A process that imported JAX, Grain, TensorStore and Numba spends 1-2 s after its last statement
freeing modules and objects (measured on the project's machine), work that changes nothing
outside the process. `exit_now` does what an ordinary exit does that has an effect outside the
process, in the same order, then ends the process at once:

1. `threading._shutdown()`: the callbacks Python runs before joining threads (they tell idle
   `concurrent.futures` workers to stop), then a join of every non-daemon thread;
2. the `atexit` handlers (logging's flush, Grain worker shutdown, `jax.distributed` shutdown,
   `weakref.finalize` callbacks such as temporary-directory removal);
3. a flush of `sys.stdout` and `sys.stderr`;
4. `os._exit(code)`.

Only a tool's `__main__` block calls it (`exit_now(run())`); `run()` called in-process returns its
code as before.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Ends the process with exit status `code` after its threads, exit handlers and output
    streams are done, skipping the teardown of modules and objects."""
    threading._shutdown()  # what Python's own exit runs first (no public equivalent)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed or replaced streams
            pass
    os._exit(code)

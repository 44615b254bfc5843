"""What a tool does in a process of its own (its `__main__` block), and never when called in-process.

* `import_grain_without_orbax`: `import grain` imports `orbax.checkpoint` whenever Orbax is
  installed (to register Grain's checkpoint arguments with it), 0.4-1.2 s on the project's
  machine: a third of a one-step `dump_batches`' imports. Grain skips that registration when the
  import fails, so a tool that saves no checkpoint imports Grain first with `orbax.checkpoint`
  marked missing. Orbax stays importable afterwards; only Grain's
  `grain.checkpoint.CheckpointSave`/`CheckpointRestore` are absent from such a process.
* `exit_now`: a process that imported JAX, Grain, TensorStore and Numba spends 1-3 s after its
  last statement freeing modules and objects, which changes nothing outside the process.
  `exit_now` does what an ordinary exit does that has an effect outside the process, in the same
  order, then ends the process at once:

  1. `threading._shutdown()`: the callbacks Python runs before joining threads (they tell idle
     `concurrent.futures` workers to stop), then a join of every non-daemon thread;
  2. the `atexit` handlers (logging's flush, Grain worker shutdown, `jax.distributed` shutdown,
     `weakref.finalize` callbacks such as temporary-directory removal);
  3. a flush of `sys.stdout` and `sys.stderr`;
  4. `os._exit(code)`.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from typing import NoReturn

_ORBAX = "orbax.checkpoint"


def import_grain_without_orbax() -> None:
    """Imports Grain unless it is already imported, without letting it import Orbax.

    A no-op when Grain or Orbax is already imported; if Grain ever fails to import without Orbax,
    it is imported the ordinary way.
    """
    if "grain" in sys.modules or _ORBAX in sys.modules:
        return
    sys.modules[_ORBAX] = None  # an import of it raises ImportError, which Grain catches
    try:
        importlib.import_module("grain")
    except ImportError:  # drop what the failed import left behind, so the next starts afresh
        for name in [n for n in sys.modules if n == "grain" or n.startswith("grain.")]:
            del sys.modules[name]
    finally:
        if sys.modules.get(_ORBAX, False) is None:  # the marker, not an Orbax imported since
            del sys.modules[_ORBAX]
    importlib.import_module("grain")  # done already, or the ordinary import after a failure


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

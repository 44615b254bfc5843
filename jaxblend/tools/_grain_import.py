"""Importing Grain in a tool that saves no checkpoint, without Orbax.

`import grain` imports `orbax.checkpoint` whenever Orbax is installed (it registers Grain's
checkpoint arguments with Orbax), which took 0.4-0.8 s on the project's machine: a third of a
one-step `dump_batches`' imports. Grain skips that registration when the import fails, so a tool
that never checkpoints imports Grain first with `orbax.checkpoint` marked missing; Orbax itself
stays importable afterwards (only Grain's `grain.checkpoint.CheckpointSave`/`CheckpointRestore`
are then absent from the process, which such a tool never uses).
"""

from __future__ import annotations

import importlib
import sys

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
    except ImportError:
        _forget_partial_grain()
    finally:
        if _ORBAX in sys.modules and sys.modules[_ORBAX] is None:
            del sys.modules[_ORBAX]
    importlib.import_module("grain")  # done already, or the ordinary import after a failure


def _forget_partial_grain() -> None:
    """Drops the Grain modules a failed import left behind, so the next import starts afresh."""
    for name in [n for n in sys.modules if n == "grain" or n.startswith("grain.")]:
        del sys.modules[name]

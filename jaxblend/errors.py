"""One-line failure messages, shared by the command lines (`jaxblend.cli.call`) and the peer
watch of multi-process runs (`jaxblend.peer_watch`).

A usage error (an unknown or malformed flag, `absl.app.UsageError`) exits with `USAGE_EXIT` (2),
any other failure with `ERROR_EXIT` (1).
"""

from __future__ import annotations

import sys
import traceback

from absl import app, flags

USAGE_EXIT = 2
ERROR_EXIT = 1


def error_line(err: BaseException) -> str:
    """The one-line message of a failure: its text, prefixed by its type when that says more."""
    raw = err.args[0] if isinstance(err, KeyError) and err.args else err
    message = " ".join(str(raw).split())
    if message and isinstance(err, (ValueError, OSError, app.UsageError, flags.Error)):
        return f"error: {message}"
    name = type(err).__name__
    return f"error: {name}: {message}" if message else f"error: {name}"


def print_failure(err: BaseException, verbose: bool) -> int:
    """Prints `err` as one line on stderr (after its traceback if `verbose`); returns the exit
    code it calls for."""
    if verbose:
        traceback.print_exception(err, file=sys.stderr)
    print(error_line(err), file=sys.stderr, flush=True)
    return USAGE_EXIT if isinstance(err, (app.UsageError, flags.Error)) else ERROR_EXIT

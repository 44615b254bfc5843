"""The entry point of every CLI (`jaxblend.tools.*`, `jaxblend.train`): failures in one line.

`run(main)` replaces `absl.app.run(main)`. A bad flag, bad input or any other failure prints one
line `error: ...` on stderr (the exception's text, which names the flag or file) and exits
non-zero: 2 for usage errors (unknown or malformed flags, `app.UsageError`), 1 otherwise.
`--verbose` adds the Python traceback before that line. Without it, JAX's note that no TPU
backend was found on a CPU host is silenced, so an error is not preceded by unrelated log lines.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable, Collection, Sequence

from absl import app, flags

from jaxblend.tools import _megatron_argv

USAGE_EXIT = 2
ERROR_EXIT = 1

if "verbose" not in flags.FLAGS:
    flags.DEFINE_bool("verbose", False, "On failure, print the Python traceback too.")


def error_line(err: BaseException) -> str:
    """The one-line message of a failure: its text, prefixed by its type when that says more."""
    raw = err.args[0] if isinstance(err, KeyError) and err.args else err
    message = " ".join(str(raw).split())
    if message and isinstance(err, (ValueError, OSError, app.UsageError, flags.Error)):
        return f"error: {message}"
    name = type(err).__name__
    return f"error: {name}: {message}" if message else f"error: {name}"


def print_failure(err: BaseException, verbose: bool) -> int:
    """Prints a failure as `run` does (traceback only if `verbose`); returns its exit code."""
    if verbose:
        traceback.print_exception(err, file=sys.stderr)
    print(error_line(err), file=sys.stderr, flush=True)
    return USAGE_EXIT if isinstance(err, (app.UsageError, flags.Error)) else ERROR_EXIT


def _fail(err: BaseException, code: int, verbose: bool) -> None:
    print_failure(err, verbose)
    sys.exit(code)


def _parse_flags(argv: Sequence[str], megatron_nargs: Collection[str] | None = None) -> list[str]:
    if megatron_nargs is not None:
        argv = _megatron_argv.normalize_argv(list(argv), set(flags.FLAGS), megatron_nargs)
    try:
        return flags.FLAGS(list(argv))
    except flags.Error as err:
        _fail(err, USAGE_EXIT, "--verbose" in argv)
        raise  # not reached: _fail exits


def run(
    main: Callable[[list[str]], int | None], megatron_nargs: Collection[str] | None = None
) -> None:
    """Runs `main` like `absl.app.run`, turning every failure into one line (module docstring).

    Args:
      main: the program.
      megatron_nargs: when given, Megatron-LM's spellings are accepted too (dashes, `--no-x`, and
        these flags as space-separated lists; see `_megatron_argv`).
    """

    def guarded(argv: list[str]) -> int | None:
        if not flags.FLAGS.verbose:
            logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
        try:
            return main(argv)
        except app.UsageError as err:
            _fail(err, USAGE_EXIT, flags.FLAGS.verbose)
        except Exception as err:  # noqa: BLE001 - every failure becomes one line
            _fail(err, ERROR_EXIT, flags.FLAGS.verbose)
        return None

    app.run(guarded, flags_parser=lambda argv: _parse_flags(argv, megatron_nargs))

"""The entry point of every CLI (`jaxblend.tools.*`, `jaxblend.train`): flags defined when the
program runs, failures in one line.

`run(main, define=...)` replaces `absl.app.run(main)`. It defines `--verbose` and the program's
flags (`define`, which calls the `define_*` functions of `jaxblend.cli`: importing a module
defines no flag), then parses the command line. Flags that `define` defines count as the
program's own, so `--help` lists them (`--helpfull` lists every flag).

A bad flag, bad input or any other failure prints one line `error: ...` on stderr (the
exception's text, which names the flag or file) and exits non-zero: 2 for usage errors (unknown
or malformed flags, `app.UsageError`), 1 otherwise. `--verbose` adds the Python traceback before
that line. Without it, JAX's note that no TPU backend was found on a CPU host is silenced, so an
error is not preceded by unrelated log lines. A missing `--flagfile` is one line naming it.

A program that passes `quiet_logs=True` (the training example) logs only warnings and errors
unless `--verbose` or an explicit `--verbosity` is given: the INFO lines of absl, Orbax, Grain,
JAX and jaxblend are hidden, and the program's output is what it prints.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Collection, Sequence

from absl import app, flags
from absl import logging as absl_logging

from jaxblend.cli import megatron_argv
from jaxblend.errors import ERROR_EXIT, USAGE_EXIT, print_failure

__all__ = ["run"]


def _fail(err: BaseException, code: int, verbose: bool) -> None:
    print_failure(err, verbose)
    sys.exit(code)


def _define(define: Callable[[], None] | None, quiet_logs: bool) -> None:
    """Defines `--verbose` and `define`'s flags, the latter as key flags of the main module."""
    fl = flags.FLAGS
    before = set(fl)
    help_text = "On failure, print the Python traceback too."
    if quiet_logs:
        help_text += " Also show the INFO logs of the libraries (absl, Orbax, Grain, JAX)."
    flags.DEFINE_bool("verbose", False, help_text)
    if define is not None:
        define()
    for name in sorted(set(fl) - before):
        fl.register_key_flag_for_module(sys.argv[0], fl[name])


def _flagfile_error(err: flags.CantOpenFlagFileError) -> BaseException:
    """A flagfile that cannot be read, as one line naming it (absl's own text otherwise)."""
    cause = err.__context__
    if not isinstance(cause, OSError) or cause.filename is None:
        return err
    path = os.fsdecode(cause.filename)
    reason = "no such file" if isinstance(cause, FileNotFoundError) else cause.strerror
    where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
    return app.UsageError(f"--flagfile={path}: {reason}{where}")


def _parse_flags(argv: Sequence[str], megatron_nargs: Collection[str] | None = None) -> list[str]:
    if megatron_nargs is not None:
        argv = megatron_argv.normalize_argv(list(argv), set(flags.FLAGS), megatron_nargs)
    try:
        return flags.FLAGS(list(argv))
    except flags.CantOpenFlagFileError as err:
        _fail(_flagfile_error(err), USAGE_EXIT, "--verbose" in argv)
        raise  # not reached: _fail exits
    except flags.Error as err:
        _fail(err, USAGE_EXIT, "--verbose" in argv)
        raise  # not reached: _fail exits


def run(
    main: Callable[[list[str]], int | None],
    megatron_nargs: Collection[str] | None = None,
    *,
    define: Callable[[], None] | None = None,
    quiet_logs: bool = False,
) -> None:
    """Defines the flags, then runs `main` like `absl.app.run`, every failure in one line.

    Args:
      main: the program.
      megatron_nargs: when given, Megatron-LM's spellings are accepted too (dashes, `--no-x`, and
        these flags as space-separated lists; see `megatron_argv`).
      define: defines the program's flags (called once, before the command line is parsed).
      quiet_logs: without `--verbose` (or an explicit `--verbosity`), log only warnings and errors.
    """
    _define(define, quiet_logs)

    def guarded(argv: list[str]) -> int | None:
        if not flags.FLAGS.verbose:
            logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
            if quiet_logs and not flags.FLAGS["verbosity"].present:
                absl_logging.set_verbosity("warning")
        try:
            return main(argv)
        except app.UsageError as err:
            _fail(err, USAGE_EXIT, flags.FLAGS.verbose)
        except Exception as err:  # noqa: BLE001 - every failure becomes one line
            _fail(err, ERROR_EXIT, flags.FLAGS.verbose)
        return None

    app.run(guarded, flags_parser=lambda argv: _parse_flags(argv, megatron_nargs))

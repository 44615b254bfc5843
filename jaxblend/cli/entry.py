"""The entry point of every CLI (`jaxblend.tools.*`, `jaxblend.train`): flags defined when the
program runs, failures in one line, callable in-process.

`call(main, argv, define=...)` runs a program as its command line does and returns its exit code.
Each CLI module exposes `run(argv=None) -> int` built on `call` (`runner`), so a test or a Python
caller runs `jaxblend.tools.inspect.run(["stats", "--data_path=..."])` without a subprocess.

`call` defines `--verbose` and the program's flags (`define`, which calls the `define_*`
functions of `jaxblend.cli`: importing a module defines no flag), then parses the command line.
Flags that `define` defines count as the program's own: `--help` prints the program's module
docstring and those flags grouped by what they configure (`jaxblend.cli.flag_help`) and exits 0;
`--helpfull` lists every flag, absl's included (exit 0 too). The data tools accept the training
job's flagfile (`SharedFlags`; docs/design.md, "The command-line layer").

A bad flag, bad input or any other failure prints one line `error: ...` on stderr (the
exception's text, which names the flag or file) and exits non-zero: 2 for usage errors (unknown
or malformed flags, `app.UsageError`), 1 otherwise. `--verbose` adds the Python traceback before
that line. Without it, JAX's note that no TPU backend was found on a CPU host is silenced, so an
error is not preceded by unrelated log lines. A missing `--flagfile` is one line naming it.

When the program ends, `call` leaves the process as it found it: the flags it defined are removed
(flags that `jaxblend.cli` functions defined earlier in the process are set aside during the call
and put back; flags that libraries define when first imported, such as Grain's, stay, as in any
process), and the values of the other flags, the logging levels, the SIGTERM/SIGINT handlers and
the environment variables are restored. So the next call starts as clean as a new process, except
for what cannot be undone in-process: JAX's device count and backend, fixed at its first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

from absl import app, flags
from absl import logging as absl_logging

from jaxblend.cli import flag_help, megatron_argv
from jaxblend.errors import print_failure
from jaxblend.storage.object_store import sdk_logging

__all__ = ["SharedFlags", "call", "runner", "usage_errors"]


@dataclasses.dataclass(frozen=True)
class SharedFlags:
    """Another program whose flagfile a program accepts (its flags that the program does not
    define are ignored, with a note).

    Attributes:
      program: its name in the note, e.g. "jaxblend.train".
      define: defines its flags (called once, then the flags are removed again).
    """

    program: str
    define: Callable[[], None]


@contextlib.contextmanager
def usage_errors(kind: type[Exception] = ValueError) -> Iterator[None]:
    """Raises an exception of `kind` from the block again as an `app.UsageError` of the same text:
    a bad flag value, one line and the usage exit code."""
    try:
        yield
    except kind as err:
        raise app.UsageError(str(err)) from None


def _flags_of(shared: SharedFlags) -> dict[str, bool]:
    """The flags `shared.define` defines that are not defined yet (name -> boolean?), defined
    and removed again."""
    fl = flags.FLAGS
    before = set(fl)
    shared.define()
    added = {name: fl[name] for name in set(fl) - before}
    for name, flag in added.items():
        _remove_flag(fl, name, flag)
    return {name: flag.boolean for name, flag in added.items()}


def _define(define: Callable[[], None] | None, quiet_logs: bool) -> set[str]:
    """Defines `--verbose` and `define`'s flags, the latter as key flags of the main module;
    returns the names defined."""
    fl = flags.FLAGS
    before = set(fl)
    help_text = "On failure, print the Python traceback too."
    if quiet_logs:
        help_text += " Also show the INFO logs of the libraries (absl, Orbax, Grain, JAX)."
    with flag_help.group(flag_help.RUN):
        flags.DEFINE_bool("verbose", False, help_text)
    if define is not None:
        define()
    defined = set(fl) - before
    for name in sorted(defined):
        fl.register_key_flag_for_module(sys.argv[0], fl[name])
    return defined


def _flag_error(err: flags.Error) -> BaseException:
    """A flag error as one line; a flagfile that cannot be read names it (absl's own text
    otherwise)."""
    cause = err.__context__ if isinstance(err, flags.CantOpenFlagFileError) else None
    if not isinstance(cause, OSError) or cause.filename is None:
        return err
    path = os.fsdecode(cause.filename)
    reason = "no such file" if isinstance(cause, FileNotFoundError) else cause.strerror
    where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
    return app.UsageError(f"--flagfile={path}: {reason}{where}")


def _drop_ignored(args: Sequence[str], ignored: Mapping[str, bool]) -> tuple[list[str], list[str]]:
    """(`args` without the flags `ignored` (name -> boolean?), the names dropped in order).

    A flag is recognized in absl's and Megatron's spellings (`--a_b=v`, `--a-b v`, `--noa_b`,
    `--no-a-b`); the value of a non-boolean flag given as the next argument goes with it.
    Everything after a bare `--` is kept.
    """
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            kept.extend(args[i - 1:])
            break
        name, eq, _ = arg.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if not arg.startswith("-") or not name:
            kept.append(arg)
            continue
        if name not in ignored and name.startswith("no") and ignored.get(name[2:].lstrip("_")):
            name = name[2:].lstrip("_")  # --noa_b, --no-a-b of a boolean flag
        elif name not in ignored:
            kept.append(arg)
            continue
        if not eq and not ignored[name] and i < len(args) and not args[i].startswith("--"):
            i += 1  # `--flag value`: the value goes too
        if name not in dropped:
            dropped.append(name)
    return kept, dropped


def _parse_flags(
    argv: Sequence[str],
    megatron_nargs: Collection[str] | None = None,
    ignored: Mapping[str, bool] | None = None,
) -> tuple[list[str], list[str]]:
    """(the arguments left after the flags, the `ignored` flags that were given and dropped)."""
    if megatron_nargs is not None:
        argv = megatron_argv.normalize_argv(list(argv), set(flags.FLAGS), megatron_nargs)
    try:
        dropped: list[str] = []
        if ignored:
            args = flags.FLAGS.read_flags_from_files(list(argv[1:]), force_gnu=False)
            args, dropped = _drop_ignored(args, ignored)
            argv = [argv[0], *args]
        return flags.FLAGS(list(argv)), dropped
    except flags.Error as err:
        sys.exit(print_failure(_flag_error(err), "--verbose" in argv))


def _exit_code(err: SystemExit) -> int:
    """The exit status of `sys.exit(code)`, as the interpreter computes it."""
    if err.code is None:
        return 0
    if isinstance(err.code, int):
        return err.code
    print(err.code, file=sys.stderr)
    return 1


def _is_jaxblend_flag(fl: flags.FlagValues, name: str) -> bool:
    return (fl.find_module_defining_flag(name) or "").startswith("jaxblend")


@contextlib.contextmanager
def _set_aside(fl: flags.FlagValues, names: Collection[str]) -> Iterator[None]:
    """Removes the flags `names` from `fl` for the duration, then puts them back as they were
    (same flag objects, values and module registrations)."""
    objects = {name: fl[name] for name in names}
    registries = (  # (who lists a flag, how it is registered there again)
        (fl.flags_by_module_dict, fl.register_flag_by_module),
        (fl.flags_by_module_id_dict, fl.register_flag_by_module_id),
        (fl.key_flags_by_module_dict, fl.register_key_flag_for_module),
    )
    owners = {
        name: [[m for m, fs in listed().items() if flag in fs] for listed, _ in registries]
        for name, flag in objects.items()
    }
    for name, flag in objects.items():
        _remove_flag(fl, name, flag)
    try:
        yield
    finally:
        for name, flag in objects.items():
            fl[name] = flag  # its short name too
            for (_, register), modules in zip(registries, owners[name], strict=True):
                for module in modules:
                    register(module, flag)


def _remove_flag(fl: flags.FlagValues, name: str, flag: flags.Flag) -> None:
    if flag.short_name and flag.short_name in fl and fl[flag.short_name] is flag:
        delattr(fl, flag.short_name)
    if name in fl:
        delattr(fl, name)


def _flag_state(flag: flags.Flag) -> tuple[flags.Flag, object, int, bool]:
    return flag, flag.value, flag.present, flag.using_default_value


@contextlib.contextmanager
def _process_state_restored() -> Iterator[set[str]]:
    """Restores what a program changes in the process: the values of the flags defined before
    it, logging levels, signal handlers and environment variables; removes the flags it defined
    (the names added to the set it yields, and any `jaxblend` flag)."""
    fl = flags.FLAGS
    app.define_help_flags()  # absl's --help flags stay defined, as in every absl program
    ours = [name for name in fl if _is_jaxblend_flag(fl, name)]
    with _set_aside(fl, ours):
        before = {name: _flag_state(fl[name]) for name in fl}
        levels = {
            name: logging.getLogger(name).level for name in ("", "absl", "jax._src.xla_bridge")
        }
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        environ = dict(os.environ)
        defined: set[str] = set()
        try:
            yield defined
        finally:
            # The program's flags go; flags that libraries define when imported stay defined.
            new = [n for n in fl if n not in before]
            for name in [n for n in new if n in defined or _is_jaxblend_flag(fl, n)]:
                _remove_flag(fl, name, fl[name])
            for flag, value, present, default in before.values():
                if flag.value != value:
                    flag.value = value  # --verbosity's value sets the logging levels back too
                flag.present, flag.using_default_value = present, default
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            for sig, handler in handlers.items():
                if signal.getsignal(sig) is not handler and handler is not None:
                    with contextlib.suppress(ValueError):  # not the main thread: left as set
                        signal.signal(sig, handler)
            for key in set(os.environ) - set(environ):
                del os.environ[key]
            os.environ.update({k: v for k, v in environ.items() if os.environ.get(k) != v})


def call(
    main: Callable[[list[str]], int | None],
    argv: Sequence[str] | None = None,
    megatron_nargs: Collection[str] | None = None,
    *,
    define: Callable[[], None] | None = None,
    quiet_logs: bool = False,
    shared: SharedFlags | None = None,
    dashed_help: bool = False,
    takes_args: bool = False,
) -> int:
    """Runs a program as its command line does, in this process; returns its exit code.

    Defines the flags, parses `argv` (Megatron spellings, flagfiles, one-line failures on stderr
    as on the command line), runs `main` like `absl.app.run`, then removes the flags it defined
    and restores the process state (see the module docstring).

    Args:
      main: the program (takes the arguments left after the flags, program name first).
      argv: the command line after the program name (`sys.argv[1:]` when None).
      megatron_nargs: when given, Megatron-LM's spellings are accepted too (dashes, `--no-x`, and
        these flags as space-separated lists; see `megatron_argv`).
      define: defines the program's flags (called once, before the command line is parsed).
      quiet_logs: without `--verbose` (or an explicit `--verbosity`), log only warnings and errors.
      shared: another program whose flagfile this one accepts: its flags that this program does
        not define are ignored, with one note line on stderr naming those given.
      dashed_help: `--help` shows each flag's dashed (Megatron-LM) spelling beside it.
      takes_args: `main` takes arguments besides the flags (else any is a usage error).

    Returns:
      The exit code (0 after `--help`/`--helpfull`): `main`'s return value or `sys.exit` code (0 for None), `USAGE_EXIT` for a
      usage error, `ERROR_EXIT` for any other failure.
    """
    command = [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    with _process_state_restored() as defined:
        foreign = _flags_of(shared) if shared is not None else {}
        defined |= _define(define, quiet_logs)
        ignored = {name: boolean for name, boolean in foreign.items() if name not in flags.FLAGS}

        def guarded(args: list[str]) -> int | None:
            verbose = flags.FLAGS.verbose
            if not verbose:
                logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
                if quiet_logs and not flags.FLAGS["verbosity"].present:
                    absl_logging.set_verbosity("warning")
            sdk_shown = sdk_logging.shown()
            sdk_logging.show_sdk_logging(verbose or sdk_shown)  # the AWS SDK's chain lines
            try:
                if len(args) > 1 and not takes_args:
                    raise app.UsageError(f"unexpected arguments: {args[1:]}")
                return main(args)
            except Exception as err:  # noqa: BLE001 - every failure becomes one line
                sys.exit(print_failure(err, verbose))  # its exit code: usage error or failure
            finally:
                sdk_logging.show_sdk_logging(sdk_shown)

        def parse(args: list[str]) -> list[str]:
            wanted = flag_help.help_requested(args[1:])
            if wanted is not None:
                _print_help(wanted, main, defined, megatron_nargs, dashed_help)
                sys.exit(0)
            # A fresh absl program's --verbosity: whatever an earlier in-process run (or a library)
            # left in it is not this command line's (restored when the call ends).
            flags.FLAGS["verbosity"].unparse()
            rest, dropped = _parse_flags(args, megatron_nargs, ignored)
            if dropped:
                print(
                    f"note: ignored the flags of {shared.program} that {_name(main)} does not "
                    f"use: {', '.join('--' + name for name in dropped)}",
                    file=sys.stderr, flush=True,
                )
            if flags.FLAGS["verbosity"].using_default_value:
                flags.FLAGS.verbosity = 0  # INFO, as `app.run` sets it once per process
            return rest

        try:
            app.run(guarded, argv=command, flags_parser=parse)
        except SystemExit as err:
            return _exit_code(err)
    return 0


def runner(main: Callable[..., int | None], *args, **kwargs) -> Callable[..., int]:
    """The `run(argv=None, **options) -> int` of a CLI module: runs `main` as its command line
    does, in this process (`call(main, argv, *args, **kwargs)`), and returns the exit code.

    `argv` is the arguments after the program name (`sys.argv[1:]` when None); keyword `options`
    go to `main` (e.g. dump_batches' `own_process`).
    """

    def run(argv: Sequence[str] | None = None, **options) -> int:
        program = functools.wraps(main)(functools.partial(main, **options)) if options else main
        return call(program, argv, *args, **kwargs)

    return run


def _name(main: Callable) -> str:
    """The program's name: its module's (`jaxblend.tools.inspect`, also when run as `python -m`),
    or the function's."""
    module = getattr(main, "__module__", None)
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec is not None else None
    return module or getattr(main, "__name__", "program")


def _print_help(
    wanted: str,
    main: Callable,
    names: Collection[str],
    megatron_nargs: Collection[str] | None,
    dashed: bool,
) -> None:
    """Prints `--help` (the program's docstring and own flags, grouped) or `--helpfull` (absl's
    list of every flag) on stdout."""
    module = sys.modules.get(getattr(main, "__module__", ""), None)
    doc = getattr(module, "__doc__", None)
    if wanted == "helpfull":
        text = f"{(doc or '').strip()}\n\nflags:\n{flags.FLAGS.get_help()}\n"
    else:
        text = flag_help.program_help(doc, flags.FLAGS, names, megatron_nargs, dashed)
    with contextlib.suppress(BrokenPipeError):  # `--help | head`
        sys.stdout.write(text)
        sys.stdout.flush()


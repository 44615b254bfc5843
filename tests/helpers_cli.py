"""Runs a CLI (`jaxblend.tools.*`, `jaxblend.train`) in the test process, as its command line
would: `run_tool("jaxblend.tools.inspect", ["stats", ...])` returns the exit code and what the
program wrote on stdout and stderr (file descriptors 1 and 2, so the lines of libraries, JAX and
child processes are there too), like `subprocess.run([sys.executable, "-m", module, *argv],
capture_output=True, text=True)` without starting Python again.

Each module's `run(argv) -> int` (built on `jaxblend.cli.call`) removes the flags it defined and
restores logging, signal handlers and environment afterwards, so runs do not leak into each other.
What the process boundary is for (killing, several JAX processes, another device count, `python -m`
itself) stays a subprocess in the tests that need it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence

from absl import logging as absl_logging


@dataclasses.dataclass(frozen=True)
class Ran:
    """The outcome of a run, named like `subprocess.CompletedProcess`'s fields."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _text_stream(fd: int) -> io.TextIOWrapper:
    return io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors="replace", line_buffering=True,
    )


@contextlib.contextmanager
def _captured(files: tuple[tempfile.SpooledTemporaryFile, ...]) -> Iterator[None]:
    """Sends fds 1 and 2 (and `sys.stdout`/`sys.stderr`, absl's log stream) to `files`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    old_streams = sys.stdout, sys.stderr
    handler = absl_logging.get_absl_handler().python_handler
    old_log_stream = handler.stream
    os.dup2(files[0].fileno(), 1)
    os.dup2(files[1].fileno(), 2)
    sys.stdout, sys.stderr = _text_stream(1), _text_stream(2)
    handler.stream = sys.stderr
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        handler.stream = old_log_stream
        sys.stdout, sys.stderr = old_streams
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: str | os.PathLike | None) -> Iterator[None]:
    before = dict(os.environ)
    here = os.getcwd()
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(before)


def run_tool(
    module: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    check: bool = False,
) -> Ran:
    """Runs `python -m module *argv` in this process.

    Args:
      module: `jaxblend.tools.<name>` or `jaxblend.train`.
      argv: the command line after the module name.
      env: the environment during the run (the current one when None), restored afterwards.
      cwd: the working directory during the run, restored afterwards.
      check: fail (AssertionError with the output) on a non-zero exit code.
    """
    program = importlib.import_module(module)
    args = [str(a) for a in argv]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        with _environment(env, cwd), _captured((out, err)):
            code = program.run(args)
        out.seek(0)
        err.seek(0)
        ran = Ran(
            [module, *args], code, out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
        )
    if check and ran.returncode != 0:
        raise AssertionError(f"{module} exited {ran.returncode}:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}")
    return ran

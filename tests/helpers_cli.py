"""Runs a CLI (`jaxblend.tools.*`, `jaxblend.train`) in the test process, as its command line
would: `run_tool("jaxblend.tools.inspect", ["stats", ...])` returns the exit code and what the
program wrote on stdout and stderr (file descriptors 1 and 2, so the lines of libraries, JAX and
child processes are there too), like `subprocess.run([sys.executable, "-m", module, *argv],
capture_output=True, text=True)` without starting Python again.

Each module's `run(argv) -> int` (built on `jaxblend.cli.call`) removes the flags it defined and
restores logging, signal handlers and environment afterwards, so runs do not leak into each other.
What the process boundary is for (killing, several JAX processes, `python -m` itself) stays a
subprocess in the tests that need it. JAX's device count is fixed at its first use (8 CPU devices,
conftest.py): `run_tool` starts a process of its own for a command whose `--num_cpu_devices` asks
for another count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence

from absl import logging as absl_logging

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's jaxblend
# Where the captured output goes: the system's temporary directory, whatever a test later makes
# `tempfile` use (some point it at a missing directory to prove nothing is written there).
_CAPTURE_DIR = tempfile.gettempdir()


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
    own_process: bool = False,
) -> Ran:
    """Runs `python -m module *argv` in this process.

    Args:
      module: `jaxblend.tools.<name>` or `jaxblend.train` (a module with `run(argv) -> int`).
      argv: the command line after the module name.
      env: the environment during the run (the current one when None), restored afterwards.
      cwd: the working directory during the run, restored afterwards.
      check: fail (AssertionError with the output) on a non-zero exit code.
      own_process: run `python -m module` in a process of its own (where what is checked is a
        fresh process's state, such as which libraries' log lines it shows).
    """
    if own_process or _needs_own_process(argv):
        return _run_subprocess(module, argv, env=env, cwd=cwd, check=check)
    program = importlib.import_module(module).run
    return run_program(program, argv, env=env, cwd=cwd, check=check, name=module)


def _cpu_devices_asked(argv: Sequence[str]) -> int | None:
    """The `--num_cpu_devices` of a command line (None when not given)."""
    asked = None
    for i, arg in enumerate(argv):
        if arg.startswith("--num_cpu_devices="):
            asked = int(arg.split("=", 1)[1])
        elif arg == "--num_cpu_devices" and i + 1 < len(argv):
            asked = int(argv[i + 1])
    return asked


def _needs_own_process(argv: Sequence[str]) -> bool:
    """Whether the command asks for another CPU device count than this process's JAX has (fixed
    at its first use: 8, set in conftest.py)."""
    asked = _cpu_devices_asked([str(a) for a in argv])
    return asked is not None and asked != _device_count()


def _device_count() -> int:
    import jax

    return jax.device_count()


def _run_subprocess(
    module: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike | None,
    check: bool,
) -> Ran:
    args = [str(a) for a in argv]
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([_ROOT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=600,
        check=False, env=env, cwd=cwd,
    )
    ran = Ran([module, *args], done.returncode, done.stdout, done.stderr)
    if check and ran.returncode != 0:
        raise AssertionError(
            f"{module} exited {ran.returncode}:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
        )
    return ran


def run_program(
    program: Callable[[list[str]], int],
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    check: bool = False,
    name: str = "program",
) -> Ran:
    """Runs `program(argv)` (e.g. a `jaxblend.cli.call` of a test's own `main`) with its output
    captured, as `run_tool` does."""
    args = [str(a) for a in argv]
    _device_count()  # JAX's backend starts before the program, with the test process's devices
    with tempfile.TemporaryFile(dir=_CAPTURE_DIR) as out, \
            tempfile.TemporaryFile(dir=_CAPTURE_DIR) as err:
        with _environment(env, cwd), _captured((out, err)):
            code = program(args)
        out.seek(0)
        err.seek(0)
        ran = Ran(
            [name, *args], code, out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
        )
    if check and ran.returncode != 0:
        raise AssertionError(
            f"{name} exited {ran.returncode}:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
        )
    return ran

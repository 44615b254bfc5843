r"""Runs N JAX processes of one command on this machine, joined with jax.distributed on localhost.

Usage:
  python -m jaxblend.tools.launch_local --num_processes=2 --devices_per_process=4 -- \
      python -m jaxblend.train --flagfile=configs/demo.flags

Each process gets `--coordinator_address=localhost:PORT --num_processes=N --process_id=i`
appended and its own CPU device count; a leading `python` (or `python3`) runs with this launcher's
own interpreter (`sys.executable`), not whichever `python` comes first on PATH; output lines are prefixed with `[i]`. `{process_id}` in an
argument is replaced by the process's index (e.g. `--workdir=/tmp/host{process_id}`, so that the
processes share no local directory, like the hosts of a pod). If one process fails, the others are
stopped and the launcher exits with its code.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from absl import app, flags

from jaxblend.cli import entry, tool_flags


def free_port() -> int:
    """A TCP port free on localhost right now."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def child_env(devices: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for one process: its own CPU device count, no inherited XLA_FLAGS."""
    env = dict(os.environ if base is None else base)
    xla = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*xla, f"--xla_force_host_platform_device_count={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    return env


# Program names run with this launcher's interpreter rather than looked up on PATH.
_PYTHON_NAMES = ("python", "python3")


def process_args(command: Sequence[str], process_id: int) -> list[str]:
    """`command` with `{process_id}` replaced by `process_id` in every argument, and a leading
    `python`/`python3` replaced by `sys.executable` (the environment jaxblend runs in)."""
    args = [arg.replace("{process_id}", str(process_id)) for arg in command]
    if args and args[0] in _PYTHON_NAMES:
        args[0] = sys.executable
    return args


def run_processes(
    command: Sequence[str],
    num_processes: int,
    devices_per_process: int,
    timeout: float,
    *,
    echo: bool = True,
) -> tuple[int, list[str]]:
    """Starts `num_processes` copies of `command` and waits for all of them.

    Returns:
      (exit code: 0 if all succeeded, else the first failure's code; each process's output).
    """
    port = free_port()
    procs = []
    outputs: list[list[str]] = [[] for _ in range(num_processes)]
    for i in range(num_processes):
        args = [
            *process_args(command, i),
            f"--coordinator_address=localhost:{port}",
            f"--num_processes={num_processes}",
            f"--process_id={i}",
        ]
        procs.append(
            subprocess.Popen(
                args, env=child_env(devices_per_process), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, start_new_session=True,
            )
        )

    def pump(i: int, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            outputs[i].append(line)
            if echo:
                sys.stdout.write(f"[{i}] {line}")
                sys.stdout.flush()

    threads = [threading.Thread(target=pump, args=(i, p), daemon=True) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    code = 0
    try:
        while any(p.poll() is None for p in procs):
            failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                code = failed[0] if failed else 124
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()
        for t in threads:
            t.join(timeout=5)
    if code == 0:
        code = next((p.returncode for p in procs if p.returncode != 0), 0)
    return code, ["".join(o) for o in outputs]


def main(argv: Sequence[str]) -> None:
    command = list(argv[1:])
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise app.UsageError("give the command to run after --")
    fl = flags.FLAGS
    code, _ = run_processes(command, fl.num_processes, fl.devices_per_process, fl.timeout)
    sys.exit(code)


run = entry.runner(main, define=tool_flags.define_launch_local_flags, takes_args=True)


if __name__ == "__main__":
    sys.exit(run())

"""Runs a jaxblend CLI as N real local JAX processes (jax.distributed on localhost) for tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

from jaxblend.tools.launch_local import child_env, free_port, process_args, run_processes

TIMEOUT = 240


def run_cli(module: str, args: list[str], num_processes: int, devices_per_process: int) -> str:
    """Runs `python -m module args` on `num_processes` processes; returns process 0's output.

    Fails the test with every process's output if any process fails.
    """
    command = [sys.executable, "-m", module, *args, "--distributed_timeout=60"]
    code, outputs = run_processes(command, num_processes, devices_per_process, TIMEOUT, echo=False)
    if code != 0:
        joined = "\n".join(f"--- process {i} ---\n{o[-4000:]}" for i, o in enumerate(outputs))
        raise AssertionError(f"{module} failed with exit code {code}:\n{joined}")
    return outputs[0]


class Job:
    """N processes of one command started together, which a test can signal one by one.

    `args_of(i)` may give process i extra arguments (e.g. a broken data path on one process).
    Each process's stdout+stderr is collected in `outputs[i]`.
    """

    def __init__(self, command: list[str], num_processes: int, devices: int, args_of=None) -> None:
        port = free_port()
        self.outputs: list[list[str]] = [[] for _ in range(num_processes)]
        self._cond = threading.Condition()
        self.procs = []
        for i in range(num_processes):
            extra = args_of(i) if args_of else []
            args = [
                *process_args(command, i), *extra, f"--coordinator_address=localhost:{port}",
                f"--num_processes={num_processes}", f"--process_id={i}",
            ]
            self.procs.append(subprocess.Popen(
                args, env=child_env(devices), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, start_new_session=True,
            ))
        self._threads = [
            threading.Thread(target=self._pump, args=(i, p), daemon=True)
            for i, p in enumerate(self.procs)
        ]
        for t in self._threads:
            t.start()

    def _pump(self, i: int, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            with self._cond:
                self.outputs[i].append(line)
                self._cond.notify_all()

    def output(self, i: int) -> str:
        with self._cond:
            return "".join(self.outputs[i])

    def wait_for_line(self, i: int, pattern: str, timeout: float = TIMEOUT) -> str:
        """Waits until process i prints a line matching `pattern`; returns it (fails otherwise)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self.outputs[i]:
                    if regex.search(line):
                        return line
                if self.procs[i].poll() is not None and not self._threads[i].is_alive():
                    raise AssertionError(f"process {i} exited before {pattern!r}:\n{self.dump()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"no {pattern!r} from process {i}:\n{self.dump()}")
                self._cond.wait(0.2)

    def send(self, i: int, sig: int) -> None:
        os.kill(self.procs[i].pid, sig)

    def wait(self, timeout: float = TIMEOUT) -> list[int | None]:
        """Exit codes once all exited (None: still running at the deadline, then killed)."""
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        codes = [p.poll() for p in self.procs]
        self.kill()
        for t in self._threads:
            t.join(5)
        return codes

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def dump(self) -> str:
        return "\n".join(
            f"--- process {i} ---\n{''.join(o)[-4000:]}" for i, o in enumerate(self.outputs)
        )


def assert_same_batches(x: dict, y: dict) -> None:
    """Asserts two dumps of batches (name -> array) hold the same arrays, byte for byte."""
    assert x.keys() == y.keys()
    for key, value in x.items():
        assert value.tobytes() == y[key].tobytes(), key

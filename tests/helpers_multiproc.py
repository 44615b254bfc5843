"""Runs a jaxblend CLI as N real local JAX processes (jax.distributed on localhost) for tests."""

from __future__ import annotations

import sys

from jaxblend.tools.launch_local import run_processes

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

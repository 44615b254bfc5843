"""Runs a jaxblend CLI as N real local JAX processes (jax.distributed on localhost) for tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

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


GROUP_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loading", "group_worker.py")

# The groups of processes a `DumpPlan` starts, (processes, devices per process), in launch order:
# a state saved on 2 processes resumes on 1 or 4 (and one saved on 1 process resumes on 2 x 8).
GROUP_ORDER = ((2, 4), (1, 8), (4, 2), (2, 8))

# Seconds a group may take per job it runs (on top of `TIMEOUT`): the jobs run one after another.
SECONDS_PER_JOB = 60


class DumpPlan:
    """Batch dumps to run on groups of real local JAX processes, each group started once.

    A test module registers every dump it compares (`dump`, `token_budget`), then `run` starts
    each group of `GROUP_ORDER` that has jobs once (`tests/loading/group_worker.py`), which runs
    the group's jobs in turn, in the order registered: the processes' start-up (imports,
    `jax.distributed`) is paid once per group, not once per dump.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._jobs: dict[tuple[int, int], list[dict]] = {group: [] for group in GROUP_ORDER}
        self._names: set[str] = set()

    def out(self, name: str) -> Path:
        """The directory of job `name`'s output."""
        return self.root / name

    def _add(self, processes: int, devices: int | None, job: dict) -> None:
        group = (processes, devices or 8 // processes)
        if group not in self._jobs:
            raise ValueError(f"no group of {group[0]} processes x {group[1]} devices: {GROUP_ORDER}")
        if job["name"] in self._names:
            raise ValueError(f"job {job['name']!r} registered twice")
        self._names.add(job["name"])
        self._jobs[group].append(job)

    def dump(
        self,
        name: str,
        processes: int,
        args: list[str],
        *,
        devices: int | None = None,
        expect_failure: bool = False,
    ) -> None:
        """Registers `jaxblend.tools.dump_batches` with `args` (its `--out` is `out(name)`) on
        `processes` processes of `devices` devices each (default: 8 devices in all)."""
        self._add(processes, devices, {
            "name": name, "kind": "dump_batches", "args": [*args, f"--out={self.out(name)}"],
            "expect_failure": expect_failure,
        })

    def token_budget(self, name: str, processes: int, **spec) -> None:
        """Registers a bucketed run over a saved `TokenBudgetPlan` (`spec`: see the worker)."""
        self._add(processes, None, {
            "name": name, "kind": "token_budget", "args": {**spec, "out": str(self.out(name))},
        })

    def run(self) -> DumpResults:
        """Starts every group that has jobs, in `GROUP_ORDER`; fails with every process's output
        if a process fails."""
        results: dict[str, dict] = {}
        for (processes, devices), jobs in self._jobs.items():
            if not jobs:
                continue
            directory = self.root / f"group_{processes}x{devices}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "jobs.json").write_text(json.dumps(jobs))
            command = [sys.executable, GROUP_WORKER, f"--jobs={directory / 'jobs.json'}"]
            timeout = TIMEOUT + SECONDS_PER_JOB * len(jobs)
            code, outputs = run_processes(command, processes, devices, timeout, echo=False)
            if code != 0:
                joined = "\n".join(f"--- process {i} ---\n{o[-6000:]}" for i, o in enumerate(outputs))
                raise AssertionError(
                    f"group of {processes} x {devices} devices failed with exit code {code}:\n"
                    f"{joined}"
                )
            results.update(json.loads((directory / "results.json").read_text()))
        return DumpResults(self, results)


class DumpResults:
    """What the jobs of a `DumpPlan` produced: exit codes, error lines, batches and states."""

    def __init__(self, plan: DumpPlan, results: dict[str, dict]) -> None:
        self._plan = plan
        self._results = results

    def code(self, name: str) -> int:
        return self._results[name]["code"]

    def errors(self, name: str) -> list[str]:
        """The job's output lines starting with "error:"."""
        return self._results[name]["errors"]

    def out(self, name: str) -> Path:
        return self._plan.out(name)

    def batches(self, name: str) -> dict[str, np.ndarray]:
        """The job's `batches.npz` (name -> array)."""
        with np.load(self._plan.out(name) / "batches.npz") as f:
            return {k: f[k] for k in f.files}

    def state(self, name: str) -> dict:
        """The loader state a `token_budget` job saved after its last step."""
        return json.loads((self._plan.out(name) / "state.json").read_text())

"""kill -9 of the preprocessing driver ends its worker processes (and the resource tracker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers_kill import ROOT

from jaxblend import _pause
from tests.preprocess.conftest import make_documents


def _session_processes(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ...
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(entry))
    return pids


def test_kill_9_of_the_driver_ends_its_workers(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in make_documents(200, seed=3)))
    args = [sys.executable, "-m", "jaxblend.tools.preprocess", f"--input={src}",
            f"--output_prefix={tmp_path / 'c'}", "--tokenizer_type=byte", "--partitions=4",
            "--workers=2", "--noprogress"]
    # A worker stops at partition 1 (the driver waits for it): the driver and both pool workers
    # are alive when the driver alone is killed.
    env = dict(os.environ, PYTHONPATH=ROOT, **{_pause.ENV: "partition:1"})
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.strip() == "jaxblend paused at partition:1":
                break
        else:
            raise AssertionError("never paused:\n" + "".join(lines)[-3000:])
        deadline = time.monotonic() + 60
        while len(_session_processes(proc.pid)) < 3:  # driver + 2 workers (+ resource tracker)
            assert time.monotonic() < deadline, _session_processes(proc.pid)
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only, not its process group
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while _session_processes(proc.pid):
            assert time.monotonic() < deadline, (
                f"orphans of the killed driver still alive: {_session_processes(proc.pid)}"
            )
            time.sleep(0.05)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)
        proc.stderr.close()


_CHILD = """
import multiprocessing, sys, time
from jaxblend.preprocess import parent_watch

def grandchild(parent_pid, use_prctl):
    if not use_prctl:
        parent_watch._set_pdeathsig = lambda: False  # the parent-pid watch thread instead
    parent_watch.die_with_parent(parent_pid)
    time.sleep(3600)

if __name__ == "__main__":
    import os
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=grandchild, args=(os.getpid(), sys.argv[1] == "prctl"))
    p.start()
    print(p.pid, flush=True)
    time.sleep(3600)
"""


@pytest.mark.parametrize("how", ["prctl", "watch_thread"])
def test_die_with_parent(tmp_path, how):
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = subprocess.Popen([sys.executable, str(script), how], cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        grandchild = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while grandchild in _session_processes(proc.pid):
            assert time.monotonic() < deadline, f"{how}: the child outlived its killed parent"
            time.sleep(0.05)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)
        proc.stdout.close()

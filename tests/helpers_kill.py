"""Run a command until it reaches a `jaxblend._pause` point, then kill -9 its process group; run
the same script in this process (the rerun after the kill needs no process of its own)."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import signal
import subprocess
import sys

import pytest

from jaxblend import _pause

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kill_at(args: list[str], point: str, timeout: float = 300) -> str:
    """Runs `python args...` with `JAXBLEND_PAUSE_AT=point`, kills it -9 there; returns its stderr.

    Raises:
      AssertionError: the process ended (or stayed silent past `timeout`) without pausing.
    """
    env = dict(os.environ, PYTHONPATH=ROOT, **{_pause.ENV: point})
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    lines = []
    try:
        for line in proc.stderr:  # the pause line comes, or EOF when the process ends
            lines.append(line)
            if line.strip() == f"jaxblend paused at {point}":
                break
        else:
            raise AssertionError(f"never paused at {point}:\n{''.join(lines)[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    return "".join(lines)


def run_here(args: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the script `args[0]` with arguments `args[1:]` in this process (as `kill_at` would run
    `python args...`); returns what it printed."""
    out = io.StringIO()
    with monkeypatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(sys, "argv", list(args))
        runpy.run_path(args[0], run_name="__main__")
    return out.getvalue()

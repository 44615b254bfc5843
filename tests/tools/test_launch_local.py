"""launch_local runs a leading `python` with its own interpreter, not the first one on PATH."""

from __future__ import annotations

import os
import stat
import sys

from jaxblend.tools import launch_local


def test_leading_python_is_this_interpreter(tmp_path, monkeypatch):
    # A `python` first on PATH that is not the interpreter jaxblend runs in.
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("python", "python3"):
        script = fake / name
        script.write_text("#!/bin/sh\necho wrong-python\nexit 3\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("python", "python3"):
        code, outputs = launch_local.run_processes(
            [name, "-c", "import sys; print(sys.executable)"], 1, 1, 120, echo=False
        )
        assert code == 0, outputs
        assert outputs[0].strip().splitlines()[-1] == sys.executable


def test_only_a_leading_python_is_replaced():
    assert launch_local.process_args(["python", "-m", "x", "--d={process_id}"], 2) == [
        sys.executable, "-m", "x", "--d=2"]
    assert launch_local.process_args(["env", "python", "-c", "1"], 0) == ["env", "python", "-c", "1"]
    assert launch_local.process_args(["/usr/bin/python"], 0) == ["/usr/bin/python"]

"""`jaxblend.cli.run`: flags defined when a program runs, `--help` listing the program's flags,
Megatron's spellings, one-line failures."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, env=_ENV, timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("module", "own_flags"),
    [
        ("jaxblend.tools.dump_samples", ["--data_path", "--seq_length", "--num", "--out"]),
        ("jaxblend.tools.build_index", ["--data_path", "--data_cache_path", "--s3_endpoint"]),
        ("jaxblend.tools.launch_local", ["--num_processes", "--devices_per_process"]),
    ],
)
def test_help_lists_the_programs_own_flags(module, own_flags):
    out = _run(module, "--help")
    assert out.returncode == 1, out.stderr  # absl exits 1 after printing the help
    for flag in own_flags:
        assert flag in out.stdout, (flag, out.stdout[:2000])
    assert "--[no]verbose" in out.stdout
    assert "logtostderr" not in out.stdout  # absl's own flags are for --helpfull


def test_helpfull_lists_every_flag():
    out = _run("jaxblend.tools.dump_samples", "--helpfull")
    assert out.returncode == 1, out.stderr
    assert "--data_path" in out.stdout and "--[no]logtostderr" in out.stdout


def test_unknown_flag_is_one_usage_line():
    out = _run("jaxblend.tools.dump_samples", "--no_such_flag=1")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "no_such_flag" in out.stderr


def test_megatron_spellings_reach_the_flags(tmp_path):
    out = _run(
        "jaxblend.tools.dump_samples", "--data-path", "30", str(tmp_path / "a"), "70",
        str(tmp_path / "b"), "--seq-length", "8", "--train-samples", "4",
        f"--out={tmp_path / 'out'}",
    )
    # Parsed: the failure is the missing dataset, named with its path, not a flag error.
    assert out.returncode == 1, out.stderr
    assert str(tmp_path / "a") in out.stderr.strip().splitlines()[-1]

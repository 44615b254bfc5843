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
        ("jaxblend.tools.inspect", ["--data_path", "--step", "--plot", "--json"]),
        ("jaxblend.tools.dump_batches", ["--data_path", "--steps", "--start_step", "--out"]),
        ("jaxblend.train", ["--data_path", "--train_iters", "--lr", "--checkpoint_dir"]),
    ],
)
def test_help_lists_the_programs_own_flags(module, own_flags):
    out = _run(module, "--help")
    assert out.returncode == 1, out.stderr  # absl exits 1 after printing the help
    for flag in own_flags:
        assert flag in out.stdout, (flag, out.stdout[:2000])
    assert "--[no]verbose" in out.stdout
    for absl_flag in ("logtostderr", "--flagfile:", "--undefok", "--only_check_args", "--verbosity"):
        assert absl_flag not in out.stdout, absl_flag  # absl's own flags are for --helpfull


def test_helpfull_lists_every_flag():
    out = _run("jaxblend.tools.dump_samples", "--helpfull")
    assert out.returncode == 1, out.stderr
    assert "--data_path" in out.stdout and "--[no]logtostderr" in out.stdout


@pytest.mark.parametrize("module", ["jaxblend.train", "jaxblend.tools.inspect"])
def test_missing_flagfile_is_one_line_naming_it(module, tmp_path):
    missing = tmp_path / "nope.flags"
    out = _run(module, f"--flagfile={missing}", "stats")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [f"error: --flagfile={missing}: no such file"]


def test_relative_missing_flagfile_says_where_it_was_looked_for(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "jaxblend.tools.inspect", "--flagfile=configs/nope.flags", "stats"],
        capture_output=True, text=True, env=_ENV, timeout=300, check=False, cwd=tmp_path,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: --flagfile=configs/nope.flags: no such file (relative to {tmp_path})"
    ]


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

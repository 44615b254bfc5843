"""`jaxblend.cli.call`: flags defined when a program runs, `--help` listing the program's
flags, Megatron's spellings, one-line failures; a program run in-process leaves the process as it
found it. The programs run in this process (`helpers_cli.run_tool`), but for one `python -m` smoke
test (`tests/tools/test_cli_errors.py` also runs each tool's first failure as a process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from absl import flags
from absl import logging as absl_logging
from helpers_cli import run_program, run_tool

from jaxblend import cli
from jaxblend.cli import entry

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _run(module: str, *args: str):
    return run_tool(module, args)


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
    assert out.returncode == 0, out.stderr  # help asked for is a success (absl's exits 1)
    for flag in own_flags:
        assert flag in out.stdout, (flag, out.stdout[:2000])
    assert "--[no]verbose" in out.stdout
    for absl_flag in ("logtostderr", "--flagfile:", "--undefok", "--only_check_args", "--verbosity"):
        assert absl_flag not in out.stdout, absl_flag  # absl's own flags are for --helpfull


def test_helpfull_lists_every_flag():
    out = _run("jaxblend.tools.dump_samples", "--helpfull")
    assert out.returncode == 0, out.stderr
    assert "--data_path" in out.stdout and "--[no]logtostderr" in out.stdout


@pytest.mark.parametrize("module", ["jaxblend.train", "jaxblend.tools.inspect"])
def test_missing_flagfile_is_one_line_naming_it(module, tmp_path):
    missing = tmp_path / "nope.flags"
    out = _run(module, f"--flagfile={missing}", "stats")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [f"error: --flagfile={missing}: no such file"]


def test_relative_missing_flagfile_says_where_it_was_looked_for(tmp_path):
    out = run_tool("jaxblend.tools.inspect", ["--flagfile=configs/nope.flags", "stats"],
                   cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: --flagfile=configs/nope.flags: no such file (relative to {tmp_path})"
    ]


def test_unknown_flag_is_one_usage_line():
    # `python -m` itself: a process of its own.
    out = subprocess.run(
        [sys.executable, "-m", "jaxblend.tools.dump_samples", "--no_such_flag=1"],
        capture_output=True, text=True, env=_ENV, timeout=300, check=False,
    )
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


def _define_probe_flags() -> None:
    flags.DEFINE_integer("probe_count", 1, "A flag of the test program.")


def _probe(seen: dict):
    def main(argv: list[str]) -> int:
        seen["argv"] = argv
        seen["count"] = flags.FLAGS.probe_count
        seen["verbosity"] = absl_logging.get_verbosity()
        signal.signal(signal.SIGTERM, lambda *_: None)
        os.environ["JAXBLEND_TEST_PROBE"] = "set by the program"
        return 3
    return main


def test_call_returns_the_code_and_leaves_the_process_clean():
    fl = flags.FLAGS
    handler = signal.getsignal(signal.SIGTERM)
    verbosity = absl_logging.get_verbosity()
    for count in (5, 6):  # twice: the second call defines the flags again
        seen: dict = {}
        out = run_program(
            lambda argv, seen=seen: entry.call(
                _probe(seen), argv, define=_define_probe_flags, takes_args=True
            ),
            [f"--probe_count={count}", "rest"],
        )
        assert out.returncode == 3 and out.stderr == "", out
        assert seen["count"] == count and seen["argv"][1:] == ["rest"]
        assert seen["verbosity"] == 0  # INFO, as in a fresh absl program
        assert "probe_count" not in fl and "verbose" not in fl
        assert signal.getsignal(signal.SIGTERM) is handler
        assert "JAXBLEND_TEST_PROBE" not in os.environ
        assert absl_logging.get_verbosity() == verbosity


def test_call_sets_aside_jaxblend_flags_defined_before_and_puts_them_back():
    fl = flags.FLAGS
    if "seq_length" not in fl:
        cli.define_data_flags()
    before = fl["seq_length"]
    value = before.value
    # The program defines --seq_length itself (a second definition would fail) and parses it.
    out = run_tool("jaxblend.tools.dump_samples", ["--seq_length=notanumber"])
    assert out.returncode == 2 and "--seq_length" in out.stderr.strip().splitlines()[-1], out
    assert fl["seq_length"] is before and fl["seq_length"].value == value


def test_call_turns_a_failure_into_one_line_and_its_code():
    def main(argv: list[str]) -> None:
        raise ValueError("--probe_count=7: too many")

    out = run_program(lambda argv: entry.call(main, argv), [])
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == ["error: --probe_count=7: too many"]
    out = run_program(lambda argv: entry.call(lambda a: sys.exit(4), argv), [])
    assert out.returncode == 4 and out.stderr == ""


def test_call_refuses_arguments_unless_the_program_takes_them():
    out = run_program(lambda argv: entry.call(lambda a: None, argv), ["extra"])
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["error: unexpected arguments: ['extra']"]
    seen = []
    out = run_program(lambda argv: entry.call(seen.append, argv, takes_args=True), ["extra"])
    assert out.returncode == 0 and seen[0][1:] == ["extra"]


def test_runner_passes_options_to_the_program_and_keeps_its_help():
    seen = []

    def main(argv: list[str], option: int = 0) -> None:
        seen.append(option)

    run = entry.runner(main)
    assert run_program(lambda a: run(a, option=3), []).returncode == 0 and seen == [3]
    out = run_program(lambda a: run(a, option=3), ["--help"])
    assert out.returncode == 0 and out.stdout.startswith("`jaxblend.cli.call`: flags"), out.stdout


def test_verbose_shows_the_sdk_credential_lines_for_the_run_only(monkeypatch):
    from jaxblend.storage.object_store import sdk_logging

    monkeypatch.delenv("TENSORSTORE_VERBOSE_LOGGING", raising=False)
    seen = []

    def main(argv: list[str]) -> None:
        seen.append(sdk_logging.shown())

    assert not sdk_logging.shown()
    for argv, shown in (([], False), (["--verbose"], True), ([], False)):
        assert run_program(lambda a: entry.call(main, a), argv).returncode == 0
        assert seen.pop() is shown and not sdk_logging.shown()


def test_a_verbosity_left_by_an_earlier_run_does_not_reach_the_next_call():
    # An earlier in-process run (or a library) that set --verbosity outside `call` must not
    # change what the next program sees: a fresh absl program starts at INFO.
    fl = flags.FLAGS
    saved = (fl["verbosity"].value, fl["verbosity"].present, fl["verbosity"].using_default_value)
    try:
        fl.verbosity = -1
        seen: dict = {}
        run_program(
            lambda argv: entry.call(_probe(seen), argv, define=_define_probe_flags),
            ["--probe_count=7"],
        )
        assert seen["verbosity"] == 0
    finally:
        fl["verbosity"].value = saved[0]
        fl["verbosity"].present, fl["verbosity"].using_default_value = saved[1], saved[2]

"""Every CLI fails on bad flags and bad input with one line naming the flag or file.

Each case runs the command and checks: the exit status (2 for usage errors, 1 for bad input),
nothing on stdout, exactly one line on stderr starting with `error:` and naming the flag or file,
and no traceback (which `--verbose` adds). An error found only after work began (a step beyond the
built maps) may follow that work's log lines (absl format `I1123 ...`).

Every case runs in this process (`helpers_cli.run_tool`: the program's file descriptors 1 and 2
are captured, so library and JAX lines would show); the first case of each program also runs as
`python -m` in a process of its own, where what a fresh interpreter prints is what a user sees.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

TOOLS = "jaxblend.tools."
LOG_LINE = re.compile(r"^[IW]\d{4} ")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_errors")
    good = write_random_dataset(str(root / "good"), np.random.default_rng(0), 50)
    (root / "garbage.idx").write_bytes(b"not an index file at all" * 3)
    (root / "garbage.bin").write_bytes(b"\0" * 16)
    (root / "doc.jsonl").write_text('{"text": "hello"}\n')
    return root, good


def _cases(root, good):
    missing = f"{root}/missing"
    garbage = f"{root}/garbage"
    data = [f"--data_path={good}", "--seq_length=8"]
    return [
        # (module, args, exit status, text the line must contain)
        (TOOLS + "inspect", ["stats", "--no_such_flag"], 2, "no_such_flag"),
        (TOOLS + "inspect", ["stats", f"--data_path={missing}"], 1, f"{missing}.idx"),
        (TOOLS + "inspect", ["stats", f"--data_path={garbage}"], 1, f"{garbage}.idx"),
        (TOOLS + "inspect", ["explain", *data, "--step=-1"], 2, "--step"),
        (TOOLS + "inspect", ["frobnicate", *data], 2, "stats, explain"),
        (TOOLS + "inspect", ["explain", *data, "--step=100000"], 2, "step 100000", "after work"),
        (TOOLS + "dump_batches", [*data], 2, "--out"),
        (TOOLS + "dump_batches", [f"--data_path={missing}", "--seq_length=8", f"--out={root}/o"], 1,
         f"{missing}.idx"),
        (TOOLS + "dump_batches", [*data, "--global_batch_size=x", f"--out={root}/o"], 2,
         "--global_batch_size"),
        (TOOLS + "dump_samples", ["--seq_length=abc"], 2, "--seq_length"),
        (TOOLS + "dump_samples", [f"--data_path={good}", f"--out={root}/o"], 1, "--seq_length"),
        (TOOLS + "build_index", [*data], 2, "--data_cache_path"),
        (TOOLS + "build_index", [f"--flagfile={missing}.flags"], 2, f"{missing}.flags"),
        (TOOLS + "inspect", ["stats", f"--data_path={good}.bin"], 1, f"give {good}"),
        (TOOLS + "preprocess", [f"--input={missing}.jsonl", f"--output_prefix={root}/out",
                                "--tokenizer_type=byte"], 1, f"{missing}.jsonl"),
        (TOOLS + "preprocess", [f"--input={root}/doc.jsonl", f"--output_prefix={root}/out"], 2,
         "--tokenizer-type is required"),
        (TOOLS + "preprocess", [f"--input={root}/doc.jsonl", f"--output_prefix={root}/out",
                                "--tokenizer_type=byte", "--json_keys=body", "--noprogress"], 1,
         "no documents written", "after work"),
        (TOOLS + "preprocess", [f"--input={root}/doc.jsonl", f"--output_prefix={root}/out",
                                "--tokenizer_type=NoSuchTokenizer"], 1, "NoSuchTokenizer"),
        (TOOLS + "preprocess", [f"--input={root}/doc.jsonl"], 2, "--output_prefix"),
        (TOOLS + "launch_local", [], 2, "command"),
        (TOOLS + "launch_local", ["--num_processes=0", "--", "true"], 2, "--num_processes"),
        ("jaxblend.train", ["--train_iters=0"], 2, "--train_iters"),
        ("jaxblend.train", [f"--data_path={missing}", "--seq_length=8", "--vocab_size=100",
                            f"--workdir={root}/run"], 1, f"{missing}.idx"),
        ("jaxblend.train", [*data, f"--workdir={root}/run"], 2, "--vocab_size"),
    ]


def _run(module, args):
    return run_tool(module, args)


def _first_of_each_program(cases):
    firsts = {}
    for case in cases:
        firsts.setdefault(case[0], case)
    return list(firsts.values())


def test_every_cli_fails_with_one_line(files):
    root, good = files
    cases = _cases(root, good)
    runs = [("", case, _run(case[0], case[1])) for case in cases]
    own = _first_of_each_program(cases)
    with ThreadPoolExecutor(2) as pool:
        ran = pool.map(lambda c: run_tool(c[0], c[1], own_process=True), own)
        runs += [(" (own process)", case, out) for case, out in zip(own, ran, strict=True)]
    problems = []
    for where, (module, args, code, needle, *late), out in runs:
        lines = out.stderr.strip().splitlines()
        if late:
            lines = [line for line in lines if not LOG_LINE.match(line)]
        ok = (out.returncode == code and not out.stdout.strip() and len(lines) == 1
              and lines[0].startswith("error: ") and needle in lines[0])
        if not ok:
            problems.append(f"{module} {args}{where}: exit {out.returncode} (want {code}), "
                            f"stdout {out.stdout[-300:]!r}, stderr {out.stderr[-600:]!r}, "
                            f"want {needle!r}")
    assert not problems, "\n".join(problems)


def test_verbose_adds_the_traceback(files):
    root, _ = files
    out = _run(TOOLS + "inspect", ["stats", f"--data_path={root}/missing", "--verbose"])
    assert out.returncode == 1 and "Traceback (most recent call last)" in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: ")


def test_stats_needs_no_seq_length(files):
    _, good = files
    out = _run(TOOLS + "inspect", ["stats", f"--data_path={good}"])
    assert out.returncode == 0, out.stderr[-2000:]
    assert "documents 50" in out.stdout


def test_single_split_tools_ignore_the_other_splits(files, tmp_path):
    # Only dump_batches' own split is built (the train split's maps alone).
    root, good = files
    other = write_random_dataset(str(root / "other"), np.random.default_rng(1), 60)
    args = [f"--data_path=0.7 {good} 0.3 {other}", "--split=98,2,0", "--seq_length=8",
            "--train_samples=64", f"--out={tmp_path}", "--steps=1"]
    out = _run(TOOLS + "dump_batches", args)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "batches.npz").is_file()
    # The valid split's count, not given, is --eval_iters batches, as in training.
    out = _run(TOOLS + "dump_batches", [*args, "--which=valid"])
    assert out.returncode == 0, out.stderr[-2000:]
    # Without evaluation it holds no sample: asking for it says which flags to check.
    out = _run(TOOLS + "dump_batches", [*args, "--which=valid", "--eval_interval=0"])
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1].endswith(
        "(check --split and --valid_samples)"
    )

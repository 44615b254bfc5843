"""The training example with Megatron's phase transitions: the run saves a checkpoint and exits 0
at each transition, a relaunch with the next phase's data flags continues from the next step on a
fresh blend of the phase's length, and a changed global batch size is refused with one line."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

pytestmark = pytest.mark.slow

STEP = re.compile(r"^step\s+(\d+)\s+loss\s+[0-9.]+\s+batch\s+(\d+).*samples (.*)$", re.MULTILINE)


def _train(tmp_path, data_path, *extra):
    # In the test process: its 8 CPU devices (a launch of its own had 2; no figure below depends
    # on the device count).
    return run_tool("jaxblend.train", [
        f"--data_path={data_path}", "--split=100,0,0",
        "--seq_length=16", "--global_batch_size=8", "--eval_interval=0", "--hidden_size=32",
        "--ffn_hidden_size=64", "--num_layers=1", "--num_attention_heads=2", "--vocab_size=128",
        "--eod_id=0", "--train_iters=10", "--log_interval=1", "--save_interval=0",
        "--lr_warmup_iters=2", f"--workdir={tmp_path / 'run'}",
        # Megatron's spelling of the flag.
        "--phase-transition-iterations", "7,4", *extra,
    ], cwd=str(tmp_path))


def _losses(out) -> dict[int, str]:
    found = re.findall(r"^step\s+(\d+)\s+loss\s+([0-9.]+)", out.stdout, re.MULTILINE)
    return {int(s): loss for s, loss in found}


def _steps(out) -> dict[int, str]:
    return {int(s): mix for s, _, mix in STEP.findall(out.stdout)}


def test_each_phase_is_a_launch_with_its_own_data(tmp_path):
    rng = np.random.default_rng(4)
    a, b, c = (
        write_random_dataset(str(tmp_path / n), rng, docs, lengths=(2, 50), vocab=(1, 120), eod=0)
        for n, docs in (("a", 80), ("b", 90), ("c", 70))
    )
    checkpoints = tmp_path / "run" / "checkpoints"

    first = _train(tmp_path, f"50 {a} 50 {b}")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert sorted(_steps(first)) == [1, 2, 3, 4]
    assert _steps(first)[4] == "a=16 b=16"
    assert first.stdout.strip().splitlines()[-1].startswith(
        f"phase 1 of 3 ended at step 4 (checkpoint saved in {checkpoints}); exiting: relaunch "
        "with phase 2's data flags"
    )
    assert sorted(p.name for p in checkpoints.iterdir() if p.name.isdigit()) == ["4"]

    changed = _train(tmp_path, c, "--global_batch_size=4")
    assert changed.returncode != 0
    assert changed.stderr.strip().splitlines()[-1] == (
        f"error: --global_batch_size=4 but checkpoint {checkpoints} step 4 was trained with 8: "
        "--phase_transition_iterations requires a fixed global batch size (Megatron refuses the "
        "change too); pass --global_batch_size=8"
    )

    second = _train(tmp_path, c, "--save_interval=1", "--keep_checkpoints=10")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert "resumed from" in second.stdout
    assert "phase 2 of 3 from step 4: a fresh blend of 24 samples" in second.stdout
    steps = _steps(second)
    assert sorted(steps) == [5, 6, 7]
    assert steps[7] == "c=24"  # a new stream: counts start again with the phase's datasets
    assert "phase 2 of 3 ended at step 7" in second.stdout.strip().splitlines()[-1]

    # A preempted phase (its newest checkpoint mid-phase) resumes only with the phase's data, and
    # then trains the same step as the uninterrupted launch did.
    shutil.rmtree(checkpoints / "7")
    other = _train(tmp_path, a)
    assert other.returncode != 0
    last = other.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "fingerprint" in last, other.stderr[-2000:]
    again = _train(tmp_path, c)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "phase 2 of 3 from step" not in again.stdout  # mid-phase: the stream continues
    assert sorted(_steps(again)) == [7]
    assert _losses(again)[7] == _losses(second)[7]

    third = _train(tmp_path, f"30 {a} 70 {c}")
    assert third.returncode == 0, third.stdout[-2000:] + third.stderr[-3000:]
    assert sorted(_steps(third)) == [8, 9, 10]
    assert "finished at step 10" in third.stdout

"""The training example with --data_schedule: it trains through the stages, resumes across an
edit of the future (on another mesh) exactly where the edited run goes, and refuses an edit of the
past with one line."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

pytestmark = pytest.mark.slow

STEPS = 10
COMMON = [
    "--seq_length=16", "--global_batch_size=8", "--log_interval=1", "--eval_interval=0",
    "--save_interval=3", "--keep_checkpoints=10", f"--train_iters={STEPS}", "--hidden_size=32",
    "--ffn_hidden_size=64", "--num_layers=1", "--num_attention_heads=2", "--vocab_size=512",
    "--eod_id=0", "--valid_samples=0",
]
# Another mesh than the default (8 devices on the data axis) of the test process's 8 CPU devices:
# the batch split 4 ways, the model 2 ways.
OTHER_MESH = ["--mesh_shape=4,2", "--mesh_axes=data,tensor"]
_LINE = re.compile(r"step\s+(\d+)\s+loss\s+([0-9.]+)\s+batch\s+\d+.*samples (.*)$", re.MULTILINE)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_sched")
    rng = np.random.default_rng(9)
    return [write_random_dataset(str(root / n), rng, 60, lengths=(2, 40), vocab=(1, 500))
            for n in ("a", "b", "c")]


def schedule(path, a, b, c, second=4, third=7, third_blend=None):
    path.write_text(json.dumps({"stages": [
        {"start_step": 0, "blend": ["50", a, "50", b]},
        {"start_step": second, "blend": ["30", a, "70", c]},
        {"start_step": third, "blend": third_blend or [b]},
    ]}))
    return str(path)


def train(workdir, sched, *extra):
    return run_tool("jaxblend.train", [*COMMON, f"--workdir={workdir}",
         f"--data_schedule={sched}", f"--data_cache_path={workdir}/cache", *extra])


def stage_lines(out) -> list[str]:
    return [line for line in out.stdout.splitlines() if re.match(r"step\s+\d+\s+stage ", line)]


def lines(out) -> dict[int, tuple[str, str]]:
    return {int(s): (loss, mix) for s, loss, mix in _LINE.findall(out.stdout)}


def test_resume_across_a_future_edit_and_refuse_a_past_one(tmp_path, datasets):
    a, b, c = datasets
    base = schedule(tmp_path / "base.json", a, b, c)
    future = schedule(tmp_path / "future.json", a, b, c, third=8, third_blend=["60", c, "40", b])
    # the edited schedule run from scratch: what a resume from step 6 must reproduce
    edited = train(tmp_path / "edited", future, *OTHER_MESH)
    assert edited.returncode == 0, edited.stdout[-2000:] + edited.stderr[-3000:]
    expected = lines(edited)
    assert sorted(expected) == list(range(1, STEPS + 1))
    first = train(tmp_path / "run", base)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    before = lines(first)
    assert stage_lines(first) == [
        "step     0  stage 0 of 3 begins: a 50.0% | b 50.0%",
        "step     4  stage 1 of 3 begins: a 30.0% | c 70.0%",
        "step     7  stage 2 of 3 begins: b 100.0%",
    ]
    for k in range(1, 7):  # steps before the edit: the same losses and sample counts
        assert before[k] == expected[k], k
    # keep the step-6 checkpoint (mid stage 1) and resume with the future edited, on the other mesh
    shutil.copytree(tmp_path / "run", tmp_path / "resumed")
    for step in ("9", "10"):
        shutil.rmtree(tmp_path / "resumed" / "checkpoints" / step)
    resumed = train(tmp_path / "resumed", future, *OTHER_MESH)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout and "step 6" in resumed.stdout
    rest = lines(resumed)
    assert stage_lines(resumed) == [
        "step     6  stage 1 of 3 continues: a 30.0% | c 70.0%",
        "step     8  stage 2 of 3 begins: c 60.0% | b 40.0%",
    ]
    assert sorted(rest) == list(range(7, STEPS + 1))
    for k in rest:  # the edited future, continued from the checkpoint's counts
        assert rest[k][1] == expected[k][1], k
        assert abs(float(rest[k][0]) - float(expected[k][0])) < 1e-3, k
    # an edit of step 5 (before the resume step 6) is refused in one line
    shutil.copytree(tmp_path / "run", tmp_path / "past")
    for step in ("9", "10"):
        shutil.rmtree(tmp_path / "past" / "checkpoints" / step)
    past = schedule(tmp_path / "past.json", a, b, c, second=5)
    refused = train(tmp_path / "past", past, *OTHER_MESH)
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    err = refused.stderr.strip().splitlines()
    assert err[-1] == (
        f"error: --data_schedule {past}: stage 1 (start_step 5) differs from the checkpoint's "
        "schedule before the resume step 6; past steps cannot change: restore the checkpoint's "
        "stages up to step 6 (edit only stages that start at or after step 6)"
    ), refused.stderr[-3000:]

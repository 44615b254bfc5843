"""inspect mixture and explain with a staged train split (--data_schedule): per-stage realized vs
target, the stage boundaries in the JSON and the plot, the stage named by explain; and the
per-stage arithmetic (`jaxblend.tools._mixture`) with a stage starting inside a step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend.index import BlendSchedule, BlendStage
from jaxblend.index.blend_schedule import staged_blend_indices
from jaxblend.sampling import FixedStepPlan
from jaxblend.tools import _mixture

B, SEQ, SAMPLES = 8, 16, 400


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    root = tmp_path_factory.mktemp("stages")
    rng = np.random.default_rng(3)
    a, b, c = (write_random_dataset(str(root / n), rng, docs, lengths=(2, 70), vocab=(0, 900))
               for n, docs in (("a", 120), ("b", 160), ("c", 100)))
    stages = [{"start_step": 0, "blend": ["25", a, "75", b]},
              {"start_step": 20, "blend": ["30", b, "70", c]},
              {"start_step": 35, "blend": [a]}]
    (root / "schedule.json").write_text(json.dumps({"stages": stages}))
    args = [f"--data_schedule={root / 'schedule.json'}", f"--data_path={a}", "--split=90,10,0",
            f"--seq_length={SEQ}", f"--train_samples={SAMPLES}", "--valid_samples=16",
            f"--data_cache_path={root / 'cache'}", f"--global_batch_size={B}"]
    schedule = BlendSchedule(tuple(BlendStage(s["start_step"] * B, s["blend"]) for s in stages))
    return args, (a, b, c), schedule


def run(*args):
    out = run_tool("jaxblend.tools.inspect", [*args])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


def test_mixture_per_stage_realized_vs_target_and_boundaries(staged, tmp_path):
    args, names, schedule = staged
    start, end = 10, 40  # across all three stages, cutting the first and the last
    out = run("mixture", *args, f"--start_step={start}", f"--end_step={end}",
              f"--plot={tmp_path / 'mix.png'}", f"--json={tmp_path / 'mix.json'}")
    result = json.loads((tmp_path / "mix.json").read_text())
    stages = result["stages"]
    assert [(s["stage"], s["start_step"], s["start_sample"], s["stop_sample"]) for s in stages] == [
        (0, 0, 0, 160), (1, 20, 160, 280), (2, 35, 280, 400)]
    assert [s["samples"] for s in stages] == [80, 120, 40]  # steps 10-19, 20-34, 35-39
    assert result["plot_stage_lines"] == [{"stage": 1, "step": 20.0}, {"stage": 2, "step": 35.0}]
    assert (tmp_path / "mix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Realized: the samples of the range in each stage, as the index layer places them.
    dataset_index, _, _ = staged_blend_indices(schedule, SAMPLES)
    targets = [[0.25, 0.75, 0.0], [0.0, 0.3, 0.7], [1.0, 0.0, 0.0]]
    for stage, lo, hi, target in zip(stages, (80, 160, 280), (160, 280, 320), targets):
        expected = np.bincount(dataset_index[lo:hi], minlength=3)
        rows = {r["dataset"]: r for r in stage["rows"]}
        assert [rows[n]["samples"] for n in names] == expected.tolist(), stage["stage"]
        assert [rows[n]["target"] for n in names] == pytest.approx(target)
        # Megatron's greedy blending: every dataset within one sample of its target count.
        for n, t in zip(names, target):
            assert abs(rows[n]["realized"] - t) * stage["samples"] <= 1.0, (stage["stage"], n)
    # Over the whole range, the stages' targets weighted by their samples (80, 120, 40).
    overall = {r["dataset"]: r for r in result["rows"]}
    assert overall[names[0]]["target"] == pytest.approx((80 * 0.25 + 40) / 240)
    assert overall[names[2]]["target"] == pytest.approx(120 * 0.7 / 240)
    assert sum(r["samples"] for r in result["rows"]) == (end - start) * B
    assert "stage 1 (from step 20): blend 30 " in out


def test_mixture_of_one_stage_range_and_of_the_validation_split(staged, tmp_path):
    args, _, _ = staged
    run("mixture", *args, "--start_step=22", "--end_step=30", f"--json={tmp_path / 'one.json'}")
    result = json.loads((tmp_path / "one.json").read_text())
    assert [s["samples"] for s in result["stages"]] == [0, 64, 0]
    assert result["stages"][0]["rows"] == [] and result["stages"][2]["rows"] == []
    # The valid split is an ordinary blend: no stages, as before.
    run("mixture", *args, "--which=valid", "--global_batch_size=4",
        f"--json={tmp_path / 'valid.json'}")
    assert "stages" not in json.loads((tmp_path / "valid.json").read_text())


@pytest.mark.parametrize(("step", "stage", "start"), [(19, 0, 0), (20, 1, 20), (49, 2, 35)])
def test_explain_names_the_stage_of_the_step_and_its_blend(staged, tmp_path, step, stage, start):
    args, names, _ = staged
    out = run("explain", *args, f"--step={step}", f"--json={tmp_path / 'e.json'}")
    result = json.loads((tmp_path / "e.json").read_text())
    (named,) = result["stages"]
    assert (named["stage"], named["start_step"], named["rows"]) == (stage, start, [0, B])
    blend = [["25", names[0], "75", names[1]], ["30", names[1], "70", names[2]], [names[0]]][stage]
    assert named["blend"] == blend
    assert out.splitlines()[0] == (
        f"step {step}: stage {stage} (from step {start}) of 3, blend {' '.join(blend)}")
    allowed = set(blend[1::2]) if len(blend) > 1 else set(blend)
    assert {row["dataset"] for row in result["rows"]} <= allowed  # the rows follow that blend


def test_stage_spans_and_report_with_a_stage_starting_inside_a_step(capsys):
    # Through the Python API a stage may start at any sample: sample 100 is row 4 of step 12.
    names = ["/d/a", "/d/b"]
    schedule = BlendSchedule((BlendStage(0, ["50", "/d/a", "50", "/d/b"]),
                              BlendStage(100, ["/d/b"])))
    steps = FixedStepPlan(8, 20)
    spans = _mixture.stage_spans(schedule, names, 160, steps)
    assert [(s.start_step, s.start_offset) for s in spans] == [(0, 0), (12, 4)]
    assert spans[1].label() == "stage 1 (from step 12, row 4)"
    assert spans[1].target.tolist() == [0.0, 1.0]
    samples = np.concatenate([steps.sample_ids(k) for k in range(10, 14)])  # samples 80..111
    ids = np.where(samples < 100, samples % 2, 1)
    result = _mixture.report(names, samples, ids, None, spans, 10, 14, "train")
    assert [s["samples"] for s in result["stages"]] == [20, 12]
    first = {r["dataset"]: r["samples"] for r in result["stages"][0]["rows"]}
    assert first == {"/d/a": 10, "/d/b": 10}
    overall = {r["dataset"]: r["target"] for r in result["rows"]}
    assert overall["/d/a"] == pytest.approx(20 * 0.5 / 32)
    assert "stage 1 (from step 12, row 4)" in capsys.readouterr().out


def test_step_of_sample_follows_the_step_plan():
    steps = FixedStepPlan(8, 5)
    assert [_mixture.step_of_sample(steps, s) for s in (0, 7, 8, 39)] == [
        (0, 0), (0, 7), (1, 0), (4, 7)]
    with pytest.raises(ValueError, match="outside the plan's 40 samples"):
        _mixture.step_of_sample(steps, 40)

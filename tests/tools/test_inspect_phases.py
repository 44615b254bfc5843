"""inspect explain and mixture with Megatron's phase transitions (--phase_transition_iterations):
a step is read from the phase holding it, a fresh blend of the phase's length, with in-phase
sample ids (as dump_batches and a relaunched Megatron job read it); a step range may not cross a
transition; the flag needs --train_samples and refuses --data_schedule, each in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend import IndexedDataset

B, SEQ = 8, 16
# A 14-step run (112 samples) with transitions at 4 and 9: phase 2 is steps [4, 9), a fresh blend
# of 5 x 8 = 40 samples.
RUN = ["--train_samples=112", "--phase_transition_iterations=4,9"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect_phases")
    rng = np.random.default_rng(11)
    a, b, c = (write_random_dataset(str(root / n), rng, docs, lengths=(2, 50), vocab=(1, 700))
               for n, docs in (("a", 70), ("b", 90), ("c", 60)))
    common = ["--split=100,0,0", f"--seq_length={SEQ}", f"--global_batch_size={B}"]
    return root, (a, b, c), common


def _run(module, *args, cwd):
    return run_tool(module, [*args], cwd=str(cwd))


def inspect(*args, cwd):
    done = _run("jaxblend.tools.inspect", *args, cwd=cwd)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def refused(*args, cwd) -> str:
    """The stderr of an inspect command that must fail with one `error:` line."""
    done = _run("jaxblend.tools.inspect", *args, cwd=cwd)
    assert done.returncode != 0, done.stdout[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def test_explain_of_a_phase_2_step_is_what_dump_batches_reads(data, tmp_path):
    root, (_, b, c), common = data
    phase2 = [f"--data_path=30 {b} 70 {c}", *common, *RUN,
              f"--data_cache_path={root / 'maps'}"]
    done = _run("jaxblend.tools.dump_batches", *phase2, "--start_step=6", "--steps=1",
                "--mesh_shape=2,4", "--mesh_axes=data,tensor", f"--out={tmp_path / 'dump'}", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with np.load(tmp_path / "dump" / "batches.npz") as f:
        sample_ids, dataset_ids = f["sample_ids"][0], f["dataset_ids"][0]
        inputs, targets = f["inputs"][0], f["targets"][0]
    # Megatron's spelling of the flag, as a migrated command line has it.
    out = inspect("explain", f"--data_path=30 {b} 70 {c}", *common, "--train_samples=112",
                  "--phase-transition-iterations", "4,9", "--step=6",
                  f"--data_cache_path={root / 'maps'}", f"--json={tmp_path / 'e.json'}",
                  cwd=tmp_path)
    explained = json.loads((tmp_path / "e.json").read_text())
    # Step 6 is the phase's third step: its in-phase samples [16, 24), run samples [48, 56).
    assert out.splitlines()[0] == (
        "step 6: phase 2 of 3 (steps [4, 9), a fresh blend of 40 samples), in-phase samples "
        "[16, 24) (run samples [48, 56))")
    phase = explained["phase"]
    assert (phase["phase"], phase["num_phases"], phase["first_step"], phase["exit_step"]) == (
        1, 3, 4, 9)
    assert (phase["phase_samples"], phase["run_samples"], phase["in_phase_samples"]) == (
        40, [32, 72], [16, 24])
    assert phase["step_run_samples"] == [48, 56]
    assert phase["transitions"]["iterations"] == [4, 9]
    rows = explained["rows"]
    assert [r["sample_id"] for r in rows] == sample_ids.tolist() == list(range(16, 24))
    assert [r["dataset_id"] for r in rows] == dataset_ids.tolist()
    datasets = {n: IndexedDataset(n) for n in explained["datasets"]}
    for row in rows:  # the pieces are the tokens the loader put in the batch
        ds = datasets[explained["datasets"][row["dataset_id"]]]
        tokens = np.concatenate([
            ds.get(p["sequence"], p["start"], p["stop"] - p["start"]) for p in row["pieces"]
        ]).astype(np.int64)
        np.testing.assert_array_equal(tokens[:-1], inputs[row["row"]])
        np.testing.assert_array_equal(tokens[1:], targets[row["row"]])
    # Without the flag the same data flags give step 6 of a whole-run blend: other samples.
    inspect("explain", f"--data_path=30 {b} 70 {c}", *common, "--train_samples=112", "--step=6",
            f"--data_cache_path={root / 'maps'}", f"--json={tmp_path / 'w.json'}", cwd=tmp_path)
    whole = json.loads((tmp_path / "w.json").read_text())
    assert "phase" not in whole
    assert [r["sample_id"] for r in whole["rows"]] == list(range(48, 56))


def test_mixture_of_phase_2_is_a_plain_fresh_blend_of_its_length(data, tmp_path):
    root, (_, b, c), common = data
    blend = f"--data_path=30 {b} 70 {c}"
    maps = f"--data_cache_path={root / 'maps'}"
    for (lo, hi), (plain_lo, plain_hi) in (((4, 9), (0, 5)), ((5, 8), (1, 4))):
        phased_json, plain_json = tmp_path / f"p{lo}.json", tmp_path / f"q{lo}.json"
        out = inspect("mixture", blend, *common, *RUN, maps, f"--start_step={lo}",
                      f"--end_step={hi}", f"--json={phased_json}",
                      f"--plot={tmp_path / 'mix.png'}", cwd=tmp_path)
        inspect("mixture", blend, *common, "--train_samples=40", maps,
                f"--start_step={plain_lo}", f"--end_step={plain_hi}", f"--json={plain_json}",
                cwd=tmp_path)
        phased = json.loads(phased_json.read_text())
        plain = json.loads(plain_json.read_text())
        assert phased["rows"] == plain["rows"], (lo, hi)
        assert sum(r["samples"] for r in phased["rows"]) == (hi - lo) * B
        assert phased["phase"]["in_phase_samples"] == [plain_lo * B, plain_hi * B]
        assert out.splitlines()[0] == (
            f"phase 2 of 3 (steps [4, 9), a fresh blend of 40 samples): steps [{lo}, {hi}) read "
            f"its samples [{plain_lo * B}, {plain_hi * B}); target: the phase's blend")
    assert (tmp_path / "mix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Over the whole phase the greedy blend meets its weights to within one sample.
    counts = {r["dataset"]: r["samples"] for r in phased["rows"]}
    assert abs(counts[b] - 0.3 * 24) <= 1 and abs(counts[c] - 0.7 * 24) <= 1
    # No --end_step: the range ends at the phase's transition, not at the run's end.
    inspect("mixture", blend, *common, *RUN, maps, "--start_step=6",
            f"--json={tmp_path / 'open.json'}", cwd=tmp_path)
    assert json.loads((tmp_path / "open.json").read_text())["end_step"] == 9
    # The last phase: steps [9, 14) are a fresh blend of 5 x 8 samples too.
    inspect("mixture", blend, *common, *RUN, maps, "--start_step=9",
            f"--json={tmp_path / 'last.json'}", cwd=tmp_path)
    last = json.loads((tmp_path / "last.json").read_text())
    assert (last["end_step"], last["phase"]["phase_samples"]) == (14, 40)
    # Same data flags and the same length as phase 2: the same fresh blend, read from sample 0.
    assert last["rows"] == json.loads((tmp_path / "q4.json").read_text())["rows"]
    # The validation split is not phased (the same at every launch): the flag leaves it alone.
    valid = [blend, "--split=90,10,0", f"--seq_length={SEQ}", "--global_batch_size=2",
             "--valid_samples=8", "--which=valid", maps]
    inspect("mixture", *valid, *RUN, f"--json={tmp_path / 'v1.json'}", cwd=tmp_path)
    inspect("mixture", *valid, "--train_samples=112", f"--json={tmp_path / 'v2.json'}",
            cwd=tmp_path)
    phased_valid = json.loads((tmp_path / "v1.json").read_text())
    assert "phase" not in phased_valid
    assert phased_valid == json.loads((tmp_path / "v2.json").read_text())


@pytest.mark.parametrize(("start", "end", "message"), [
    (2, 6, "error: steps [2, 6) cross the phase transition at step 4 (the end of phase 1 of 3)"),
    (5, 10, "error: steps [5, 10) cross the phase transition at step 9 (the end of phase 2 of 3)"),
    (10, 15, "error: steps [10, 15) run past the run's 14 steps"),
])
def test_a_range_crossing_a_transition_is_one_line(data, tmp_path, start, end, message):
    _, (a, _, _), common = data
    line = refused("mixture", f"--data_path={a}", *common, *RUN, f"--start_step={start}",
                   f"--end_step={end}", cwd=tmp_path)
    assert line.startswith(message), line
    assert "the phases have different data flags" in line or "run past" in line


def test_the_flag_needs_train_samples_and_refuses_a_data_schedule(data, tmp_path):
    _, (a, b, _), common = data
    for command in ("explain", "mixture"):
        line = refused(command, f"--data_path={a}", *common,
                       "--phase_transition_iterations=4,9", cwd=tmp_path)
        assert line == (
            "error: --phase_transition_iterations needs --train_samples: the run's samples "
            "(--train_iters x --global_batch_size), where the last phase ends"), line
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps({"stages": [{"start_step": 0, "blend": [a]},
                                               {"start_step": 4, "blend": [b]}]}))
    line = refused("explain", f"--data_schedule={schedule}", *common, *RUN, "--step=5",
                   cwd=tmp_path)
    assert "--phase_transition_iterations" in line and "--data_schedule" in line, line
    line = refused("mixture", f"--data_schedule={schedule}", f"--data_path={a}", "--split=90,10,0",
                   f"--seq_length={SEQ}", "--global_batch_size=2", *RUN, "--valid_samples=8",
                   "--which=valid", cwd=tmp_path)  # the validation split: refused just the same
    assert "--phase_transition_iterations" in line and "--data_schedule" in line, line
    line = refused("explain", f"--data_path={a}", *common, *RUN, "--rampup_batch_size=4 4 16",
                   "--step=1", cwd=tmp_path)
    assert "requires a fixed global batch size" in line and "--rampup_batch_size" in line, line
    line = refused("explain", f"--data_path={a}", *common, *RUN, "--step=14", cwd=tmp_path)
    assert line.startswith("error: step 14 is outside the run's 14 steps"), line

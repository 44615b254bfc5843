"""A 3-stage --data_schedule (a dataset joining and one leaving) on 1, 2 and 4 real local JAX
processes: the same batches byte for byte, and a state saved mid-stage on 2 processes resumes
on 4 with the same remaining batches."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_multiproc import assert_same_batches, run_cli

pytestmark = pytest.mark.multiprocess

B, SEQ, STEPS = 16, 24, 8


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp_sched")
    rng = np.random.default_rng(2)
    a, b, c = (write_random_dataset(str(root / n), rng, docs) for n, docs in
               (("a", 80), ("b", 120), ("c", 60)))
    schedule = root / "sched.json"
    schedule.write_text(json.dumps({"stages": [
        {"start_step": 0, "blend": ["30", a, "70", b]},
        {"start_step": 3, "blend": ["40", b, "60", c]},  # a leaves, c joins
        {"start_step": 6, "blend": ["50", a, "50", c]},  # b leaves, a returns
    ]}))
    return [
        f"--data_schedule={schedule}", f"--seq_length={SEQ}", "--seed=5",
        f"--train_samples={B * STEPS}", f"--data_cache_path={root / 'cache'}", "--eod_id=999",
        f"--global_batch_size={B}",
    ]


def dump(tmp_path, name, args, procs, devices, mesh_shape, mesh_axes):
    out = tmp_path / name
    run_cli("jaxblend.tools.dump_batches",
            [*args, f"--mesh_shape={mesh_shape}", f"--mesh_axes={mesh_axes}", f"--out={out}"],
            procs, devices)
    with np.load(out / "batches.npz") as f:
        return {k: f[k] for k in f.files}


def test_staged_batches_identical_on_1_2_and_4_processes(tmp_path, scheduled):
    args = [*scheduled, f"--steps={STEPS}"]
    one = dump(tmp_path, "p1", args, 1, 8, "8", "data")
    ids = one["dataset_ids"]
    assert set(np.unique(ids[:3])) == {0, 1}
    assert set(np.unique(ids[3:6])) == {1, 2}
    assert set(np.unique(ids[6:])) == {0, 2}
    assert_same_batches(one, dump(tmp_path, "p2", args, 2, 4, "4,2", "data,tensor"))
    assert_same_batches(one, dump(tmp_path, "p4", args, 4, 2, "8", "data"))


def test_state_mid_stage_on_2_processes_resumes_on_4(tmp_path, scheduled):
    full = dump(tmp_path, "full", [*scheduled, f"--steps={STEPS}"], 1, 8, "8", "data")
    state = tmp_path / "state.json"
    dump(tmp_path, "first", [*scheduled, "--steps=4", f"--state_out={state}"], 2, 4, "8", "data")
    assert json.loads(state.read_text())["step"] == 4  # inside stage 1
    rest = dump(tmp_path, "rest",
                [*scheduled, f"--steps={STEPS - 4}", f"--state_in={state}", "--worker_count=1"],
                4, 2, "4,2", "data,tensor")
    for key in full:
        assert full[key][4:].tobytes() == rest[key].tobytes(), key

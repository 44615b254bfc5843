"""Real multi-process runs (1, 2 and 4 local JAX processes): batches are topology-independent.

Each run is `python -m jaxblend.tools.dump_batches` on N processes joined by jax.distributed on
localhost, every process with its own CPU devices; process 0 gathers the global batches.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_multiproc import assert_same_batches, run_cli

pytestmark = pytest.mark.multiprocess

B = 16
SEQ = 24


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    root = tmp_path_factory.mktemp("mp_data")
    rng = np.random.default_rng(0)
    prefixes = []
    for name, docs in (("a", 150), ("b", 220)):
        prefixes.append(write_random_dataset(str(root / name), rng, docs))
    return f"30 {prefixes[0]} 70 {prefixes[1]}", str(root / "cache")


def data_args(blend, steps_total=8):
    data_path, cache = blend
    return [
        f"--data_path={data_path}", "--split=90,8,2", f"--seq_length={SEQ}", "--seed=7",
        f"--train_samples={B * steps_total}", "--valid_samples=0", "--test_samples=0", f"--data_cache_path={cache}", "--eod_id=999",
        "--reset_position_ids", "--reset_attention_mask",
    ]


def dump(tmp_path, name, args, procs, devices, mesh_shape, mesh_axes, extra=()):
    out = tmp_path / name
    run_cli(
        "jaxblend.tools.dump_batches",
        [*args, f"--global_batch_size={B}", f"--mesh_shape={mesh_shape}",
         f"--mesh_axes={mesh_axes}", f"--out={out}", *extra],
        procs, devices,
    )
    with np.load(out / "batches.npz") as f:
        return {k: f[k] for k in f.files}


def test_blend_batches_identical_on_1_2_and_4_processes(tmp_path, blend):
    args = [*data_args(blend), "--steps=3", "--start_step=1"]
    one = dump(tmp_path, "p1", args, 1, 8, "8", "data")
    two = dump(tmp_path, "p2", args, 2, 4, "4,2", "data,tensor")
    four = dump(tmp_path, "p4", args, 4, 2, "8", "data")
    assert one["inputs"].shape == (3, B, SEQ)
    np.testing.assert_array_equal(one["sample_ids"][0], np.arange(B, 2 * B))
    assert set(np.unique(one["dataset_ids"])) == {0, 1}
    assert_same_batches(one, two)
    assert_same_batches(one, four)


def test_state_from_2_processes_resumes_on_4(tmp_path, blend):
    args = data_args(blend)
    full = dump(tmp_path, "full", [*args, "--steps=4"], 1, 8, "8", "data")
    state = tmp_path / "state.json"
    dump(tmp_path, "first", [*args, "--steps=2", f"--state_out={state}"], 2, 4, "8", "data")
    assert json.loads(state.read_text())["step"] == 2
    rest = dump(
        tmp_path, "rest", [*args, "--steps=2", f"--state_in={state}", "--worker_count=1"],
        4, 2, "4,2", "data,tensor",
    )
    for key in full:
        assert full[key][2:].tobytes() == rest[key].tobytes(), key


def test_mock_data_with_fsdp_mesh(tmp_path):
    args = ["--mock_data", f"--seq_length={SEQ}", "--mock_num_samples=256", "--steps=2"]
    one = dump(tmp_path, "m1", args, 1, 8, "2,2,2", "data,fsdp,tensor")
    two = dump(tmp_path, "m2", args, 2, 4, "8", "data")
    assert_same_batches(one, two)


def test_rampup_state_from_2_processes_mid_ramp_resumes_on_4(tmp_path, blend):
    # Megatron ramp-up to 32 rows: steps of 8, 8, 16, 24, 32, 32 samples.
    args = [*data_args(blend, steps_total=10), "--rampup_batch_size=8 8 48"]

    def dump_ramp(name, extra, procs, devices, mesh_shape, mesh_axes):
        out = tmp_path / name
        run_cli(
            "jaxblend.tools.dump_batches",
            [*args, "--global_batch_size=32", f"--mesh_shape={mesh_shape}",
             f"--mesh_axes={mesh_axes}", f"--out={out}", *extra],
            procs, devices,
        )
        with np.load(out / "batches.npz") as f:
            return {k: f[k] for k in f.files}

    full = dump_ramp("full", ["--steps=6"], 1, 8, "8", "data")
    assert [full[f"sample_ids/{k}"].size for k in range(6)] == [8, 8, 16, 24, 32, 32]
    np.testing.assert_array_equal(
        np.concatenate([full[f"sample_ids/{k}"] for k in range(6)]), np.arange(120)
    )
    state = tmp_path / "ramp_state.json"
    dump_ramp("first", ["--steps=3", f"--state_out={state}"], 2, 4, "8", "data")
    assert json.loads(state.read_text())["step"] == 3  # the next step has 24 rows: mid-ramp
    rest = dump_ramp(
        "rest", ["--steps=3", f"--state_in={state}", "--worker_count=1"], 4, 2, "4,2",
        "data,tensor",
    )
    assert set(rest) == {k for k in full if int(k.split("/")[1]) >= 3}
    for key in rest:
        assert full[key].tobytes() == rest[key].tobytes(), key

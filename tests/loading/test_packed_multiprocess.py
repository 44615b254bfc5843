"""Packed rows (`--packing=best_fit`) on real multi-process runs: the global batches are the same
on 1, 2 and 4 JAX processes, and a state saved mid-epoch on 2 processes resumes on 4."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_multiproc import assert_same_batches, run_cli

pytestmark = pytest.mark.multiprocess

B, SEQ = 16, 24


@pytest.fixture(scope="module")
def args(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed_mp")
    rng = np.random.default_rng(2)
    a, b = (write_random_dataset(str(root / n), rng, d, lengths=(1, 40), eod=999)
            for n, d in (("a", 150), ("b", 220)))
    return [
        f"--data_path=30 {a} 70 {b}", "--split=90,8,2", f"--seq_length={SEQ}", "--seed=7",
        f"--train_samples={B * 8}", "--valid_samples=0", "--test_samples=0",
        f"--data_cache_path={root / 'cache'}", "--eod_id=999", "--packing=best_fit",
        "--packing_window=50", "--inter_document_masking", f"--global_batch_size={B}",
    ]


def dump(tmp_path, name, args, procs, devices, mesh_shape, mesh_axes):
    out = tmp_path / name
    run_cli("jaxblend.tools.dump_batches",
            [*args, f"--mesh_shape={mesh_shape}", f"--mesh_axes={mesh_axes}", f"--out={out}"],
            procs, devices)
    with np.load(out / "batches.npz") as f:
        return {k: f[k] for k in f.files}


def test_packed_batches_on_1_2_and_4_processes_and_a_resume_on_another_count(tmp_path, args):
    full = dump(tmp_path, "p1", [*args, "--steps=4"], 1, 8, "8", "data")
    assert (full["segment_ids"].max(-1) >= 2).any()  # rows of several documents
    assert "cu_seqlens" in full
    two = dump(tmp_path, "p2", [*args, "--steps=4"], 2, 4, "4,2", "data,tensor")
    assert_same_batches(full, two)
    state = tmp_path / "state.json"
    dump(tmp_path, "first", [*args, "--steps=2", f"--state_out={state}"], 2, 4, "8", "data")
    assert json.loads(state.read_text())["step"] == 2
    rest = dump(tmp_path, "rest", [*args, "--steps=2", f"--state_in={state}", "--worker_count=1"],
                4, 2, "4,2", "data,tensor")
    for key in full:
        assert full[key][2:].tobytes() == rest[key].tobytes(), key

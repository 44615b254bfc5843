"""Fill-in-the-middle batches, on concatenated and on packed rows, on 1, 2 and 4 real JAX processes
are the same, and a state saved on 2 processes resumes on 4 (each sample, or packed document,
draws from its own stream; every process loads the tokenizer recorded with the data)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_multiproc import assert_same_batches, run_cli

from tests.helpers_fim import make_code_dataset

pytestmark = pytest.mark.multiprocess

B = 16
SEQ = 24


@pytest.fixture(scope="module")
def args(tmp_path_factory):
    root = tmp_path_factory.mktemp("fim_mp")
    prefix, _ = make_code_dataset(root, "code", n=150, seed=5)
    return [
        f"--data_path={prefix}", "--split=100,0,0", f"--seq_length={SEQ}", "--seed=7",
        f"--train_samples={B * 6}", f"--data_cache_path={root / 'cache'}",
        "--fim_data", "--fim_rate=0.9", "--fim_spm_rate=0.5",
        "--fim_split_sample=<file_sep>", "--fim_fragment_rate=0.5",
    ]


def dump(tmp_path, name, args, procs, devices, mesh_shape, extra=()):
    out = tmp_path / name
    run_cli(
        "jaxblend.tools.dump_batches",
        [*args, f"--global_batch_size={B}", f"--mesh_shape={mesh_shape}", "--mesh_axes=data",
         f"--out={out}", *extra],
        procs, devices,
    )
    with np.load(out / "batches.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_fim_batches_identical_on_1_2_and_4_processes_and_resume_across(tmp_path, args, packing):
    args = [*args, f"--packing={packing}"]  # best_fit: each document of a row rewritten alone
    one = dump(tmp_path, "p1", [*args, "--steps=4"], 1, 8, "8")
    assert (one["inputs"][:, :, 0] == 1).mean() > 0.5  # <fim_prefix> (id 1) opens most rows
    two = dump(tmp_path, "p2", [*args, "--steps=2", f"--state_out={tmp_path / 'state.json'}"],
               2, 4, "8")
    assert json.loads((tmp_path / "state.json").read_text())["step"] == 2
    four = dump(tmp_path, "p4", [*args, "--steps=2", f"--state_in={tmp_path / 'state.json'}",
                                 "--worker_count=1"], 4, 2, "8")
    assert_same_batches({k: v[:2] for k, v in one.items()}, two)
    assert_same_batches({k: v[2:] for k, v in one.items()}, four)

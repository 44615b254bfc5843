"""Bucketed batches are byte-identical on 1 and 2 real JAX processes (jax.distributed, localhost).

Each run starts `tests/loading/token_budget_worker.py` on N processes; process 0 gathers every global
batch. The plan is computed once here and saved; the workers only load it.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from jaxblend import IndexedDatasetBuilder
from jaxblend.sampling import TokenBudgetConfig, plan_token_budget, save_token_budget_plan
from jaxblend.tools.launch_local import run_processes

pytestmark = pytest.mark.multiprocess

WORKER = os.path.join(os.path.dirname(__file__), "token_budget_worker.py")
CONFIG = TokenBudgetConfig(
    bucket_width=32, max_length=160, token_budget=1280, row_multiple=8, seed=2, leftover="pad"
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("bucketing_mp")
    prefix = str(root / "seqs")
    rng = np.random.default_rng(5)
    lengths = np.clip(rng.lognormal(3.5, 0.8, 300), 1, 220).astype(np.int64)
    with IndexedDatasetBuilder(prefix, np.uint16) as builder:
        for n in lengths.tolist():
            builder.add_sequence(rng.integers(1, 3000, n).astype(np.uint16))
            builder.end_document()
    plan = plan_token_budget(lengths, CONFIG)
    save_token_budget_plan(plan, root / "plan")
    return root, prefix, plan


def run(setup, name, procs, devices, mesh_shape, mesh_axes, extra=()):
    root, prefix, _ = setup
    out = root / f"{name}.npz"
    command = [
        sys.executable,
        WORKER,
        f"--data={prefix}",
        f"--plan={root / 'plan'}",
        f"--out={out}",
        f"--mesh_shape={mesh_shape}",
        f"--mesh_axes={mesh_axes}",
        "--distributed_timeout=60",
        *extra,
    ]
    code, outputs = run_processes(command, procs, devices, 240, echo=False)
    if code != 0:
        joined = "\n".join(f"--- process {i} ---\n{o[-3000:]}" for i, o in enumerate(outputs))
        raise AssertionError(f"bucketing worker failed with exit code {code}:\n{joined}")
    with np.load(out) as f:
        batches = {k: f[k] for k in f.files}
    return batches, json.loads((root / f"{name}.npz.state.json").read_text())


def test_bucketed_batches_identical_on_1_and_2_processes_and_resume(setup):
    _, _, plan = setup
    one, _ = run(setup, "p1", 1, 8, "8", "data")
    two, _ = run(setup, "p2", 2, 4, "4,2", "data,tensor")
    assert one.keys() == two.keys() and len(one) == 4 * len(plan)
    for key in one:
        assert one[key].tobytes() == two[key].tobytes(), key
    for k in range(len(plan)):
        assert one[f"{k}/tokens"].shape == (plan.batch_size(k), plan.padded_length(k))
        np.testing.assert_array_equal(one[f"{k}/sample_ids"], plan.sample_ids(k))
    # a state saved by a 2-process run after 2 steps resumes on 1 process with a different mesh
    first, state = run(setup, "first", 2, 4, "8", "data", ["--steps=2"])
    assert state["step"] == 2 and set(first) == {k for k in one if int(k.split("/")[0]) < 2}
    state_path = setup[0] / "state.json"
    state_path.write_text(json.dumps(state))
    rest, _ = run(setup, "rest", 1, 8, "2,4", "data,fsdp", [f"--state_in={state_path}"])
    assert set(rest) == {k for k in one if int(k.split("/")[0]) >= 2}
    for key in rest:
        assert rest[key].tobytes() == one[key].tobytes(), key

"""A step batch-size schedule resumed on 16 data shards (2 real JAX processes of 8 CPU devices)
from a state saved on 2 shards, in the phase whose batches 16 shards can split; the same run
started at step 0 on 16 shards is refused with one line (its first batches have 8 rows)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from helpers_multiproc import TIMEOUT, run_cli

from jaxblend.tools.launch_local import run_processes

pytestmark = pytest.mark.multiprocess

# 16-token samples, thresholds in tokens: 512 // 16 = 32 samples, so 4 steps of 8 rows, then 32.
FLAGS = [
    "--mock_data", "--mock_num_samples=160", "--seq_length=16",
    "--step_batch_size_schedule=0:8 512:32",
]
STEPS, RESUME = 7, 5  # 4 x 8 + 3 x 32 = 128 samples; step 5 is the second 32-row step


def dump(tmp_path, name, args, procs, devices, mesh_shape, first=0):
    """`{(key, step): global batch array}` of a dump_batches run whose first step is `first`."""
    out = tmp_path / name
    run_cli("jaxblend.tools.dump_batches",
            [*FLAGS, *args, f"--mesh_shape={mesh_shape}", "--mesh_axes=data", f"--out={out}"],
            procs, devices)
    got = {}
    with np.load(out / "batches.npz") as f:
        for stored in f.files:  # "key/step" when sizes differ, else "key" stacked over steps
            key, slash, step = stored.partition("/")
            if slash:
                got[key, int(step)] = f[stored]
            else:
                got.update({(key, first + i): batch for i, batch in enumerate(f[stored])})
    return got


def test_resume_mid_schedule_on_16_shards_matches_the_2_shard_run(tmp_path):
    full = dump(tmp_path, "full", [f"--steps={STEPS}"], 1, 2, "2")
    assert [len(full["inputs", k]) for k in range(STEPS)] == [8] * 4 + [32] * 3
    state = tmp_path / "state.json"
    dump(tmp_path, "first", [f"--steps={RESUME}", f"--state_out={state}"], 1, 2, "2")
    assert json.loads(state.read_text())["step"] == RESUME
    rest = dump(tmp_path, "rest", [f"--steps={STEPS - RESUME}", f"--state_in={state}"], 2, 8, "16",
                first=RESUME)
    assert set(rest) == {(key, k) for key, k in full if k >= RESUME}
    for key, k in rest:
        assert full[key, k].tobytes() == rest[key, k].tobytes(), (key, k)


def test_16_shards_from_step_0_are_refused_with_one_line(tmp_path):
    command = [
        sys.executable, "-m", "jaxblend.tools.dump_batches", *FLAGS, "--steps=2",
        "--mesh_shape=16", "--mesh_axes=data", f"--out={tmp_path / 'x'}", "--distributed_timeout=60",
    ]
    code, outputs = run_processes(command, 1, 16, TIMEOUT, echo=False)
    assert code != 0
    errors = [line for line in outputs[0].splitlines() if line.startswith("error:")]
    assert len(errors) == 1, outputs[0][-3000:]
    assert "the step plan has batches of 8 rows, which the mesh's batch axes" in errors[0]
    assert "multiple of the data-shard count" in errors[0]
    assert not (tmp_path / "x").exists()

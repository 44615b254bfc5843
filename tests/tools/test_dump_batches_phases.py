"""dump_batches with Megatron's phase transitions: the steps of a phase are the batches of a plain
run over a fresh blend of the phase's length, read from its first sample; steps crossing the
transition are refused with one line."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

B = 8


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    rng = np.random.default_rng(11)
    return {
        name: write_random_dataset(str(root / name), rng, docs, lengths=(2, 50), vocab=(1, 700))
        for name, docs in (("a", 70), ("b", 90), ("c", 60))
    }


def _run(args, out):
    """dump_batches in the test process: the batch split 2 ways over its 8 CPU devices (unless
    `args` gives another mesh)."""
    mesh = [] if any(a.startswith("--mesh_shape") for a in args) else [
        "--mesh_shape=2,4", "--mesh_axes=data,tensor"]
    return run_tool("jaxblend.tools.dump_batches", [
        "--split=100,0,0", "--seq_length=16", f"--global_batch_size={B}", *mesh,
        f"--out={out}", *args], cwd=str(out.parent))


def _dump(args, out):
    done = _run(args, out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with np.load(out / "batches.npz") as f:
        return {k: f[k] for k in f.files}


def test_a_phase_equals_a_fresh_blend_of_its_length(prefixes, tmp_path):
    a, b, c = prefixes["a"], prefixes["b"], prefixes["c"]
    # A 14-step run with transitions at 4 and 9 (Megatron's spelling of the flag): phase 2 (steps
    # [4, 9)) trains on "30 b 70 c", a fresh blend of 5 x 8 = 40 samples.
    phased = _dump([f"--data_path=30 {b} 70 {c}", "--train_samples=112",
                    "--phase-transition-iterations", "4,9", "--start_step=4", "--steps=5",
                    f"--data_cache_path={tmp_path / 'm1'}"], tmp_path / "phase2")
    plain = _dump([f"--data_path=30 {b} 70 {c}", "--train_samples=40", "--steps=5",
                   f"--data_cache_path={tmp_path / 'm2'}"], tmp_path / "plain")
    assert phased.keys() == plain.keys() and "inputs" in plain
    for key, value in plain.items():
        assert phased[key].tobytes() == value.tobytes(), key
    np.testing.assert_array_equal(phased["sample_ids"][0], np.arange(B))
    # The first phase over another blend: its own fresh 4 x 8 samples.
    first = _dump([f"--data_path=50 {a} 50 {b}", "--train_samples=112",
                   "--phase_transition_iterations=4,9", "--steps=4",
                   f"--state_out={tmp_path / 'state.json'}",
                   f"--data_cache_path={tmp_path / 'm1'}"], tmp_path / "phase1")
    plain1 = _dump([f"--data_path=50 {a} 50 {b}", "--train_samples=32", "--steps=4",
                    f"--data_cache_path={tmp_path / 'm2'}"], tmp_path / "plain1")
    assert first["inputs"].tobytes() == plain1["inputs"].tobytes()
    assert first["inputs"].tobytes() != phased["inputs"][:4].tobytes()
    # Phase 1's final state (step 4) starts phase 2 afresh, as a relaunched job does.
    resumed = _dump([f"--data_path=30 {b} 70 {c}", "--train_samples=112",
                     "--phase_transition_iterations=4,9", f"--state_in={tmp_path / 'state.json'}",
                     "--steps=5", f"--data_cache_path={tmp_path / 'm1'}"], tmp_path / "resumed")
    assert resumed["inputs"].tobytes() == plain["inputs"].tobytes()


def test_steps_across_a_transition_are_one_line(prefixes, tmp_path):
    done = _run([f"--data_path={prefixes['a']}", "--train_samples=112",
                 "--phase_transition_iterations=4,9", "--start_step=2", "--steps=3"],
                tmp_path / "x")
    assert done.returncode != 0
    assert "crosses the phase transition at step 4" in done.stderr, done.stderr[-2000:]


@pytest.mark.multiprocess
def test_a_phase_is_the_same_on_two_processes(prefixes, tmp_path):
    from helpers_multiproc import run_cli

    b, c = prefixes["b"], prefixes["c"]
    phase = [f"--data_path=30 {b} 70 {c}", "--train_samples=112",
             "--phase_transition_iterations=4,9", "--start_step=5", "--steps=4",
             f"--data_cache_path={tmp_path / 'maps'}"]
    # The batch split 4 ways: over this process's 8 devices, and over 2 processes of 2 devices.
    one = _dump([*phase, "--mesh_shape=4,2", "--mesh_axes=data,tensor"], tmp_path / "one")
    run_cli("jaxblend.tools.dump_batches", [
        *phase, "--mesh_shape=4", "--mesh_axes=data", "--split=100,0,0", "--seq_length=16",
        f"--global_batch_size={B}", f"--out={tmp_path / 'two'}",
    ], 2, 2)
    with np.load(tmp_path / "two" / "batches.npz") as f:
        two = {k: f[k] for k in f.files}
    assert one.keys() == two.keys()
    for key, value in one.items():
        assert two[key].tobytes() == value.tobytes(), key
    np.testing.assert_array_equal(one["sample_ids"][0], np.arange(B, 2 * B))

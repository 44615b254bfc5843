"""inspect (stats, explain, mixture, preflight) and the configs/ flagfiles."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
from absl import flags
from helpers_cli import run_program, run_tool
from helpers_data import write_random_dataset

import jaxblend.train
from jaxblend import IndexedDataset, cli

B, SEQ = 8, 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    rng = np.random.default_rng(3)
    prefixes = []
    for name, docs in (("a", 120), ("b", 160)):
        prefixes.append(write_random_dataset(str(root / name), rng, docs, lengths=(2, 70), vocab=(0, 900)))
    args = [f"--data_path=25 {prefixes[0]} 75 {prefixes[1]}", "--split=90,10,0", f"--seq_length={SEQ}",
            "--train_samples=400", "--valid_samples=16", f"--data_cache_path={root / 'cache'}"]
    return root, prefixes, args


def run(module, *args, check=True):
    out = run_tool(module, [*args])
    if check:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def test_explain_agrees_with_dump_batches(data, tmp_path):
    _, _, args = data
    run("jaxblend.tools.dump_batches", *args, f"--global_batch_size={B}", "--steps=1", "--start_step=3",
        "--mesh_shape=8", f"--out={tmp_path}", "--num_cpu_devices=8")
    run("jaxblend.tools.inspect", "explain", *args, f"--global_batch_size={B}", "--step=3",
        f"--json={tmp_path / 'explain.json'}")
    explained = json.loads((tmp_path / "explain.json").read_text())
    with np.load(tmp_path / "batches.npz") as f:
        inputs, targets, dataset_ids = f["inputs"][0], f["targets"][0], f["dataset_ids"][0]
    datasets = {n: IndexedDataset(n) for n in explained["datasets"]}
    assert len(explained["rows"]) == B
    for row in explained["rows"]:
        r = row["row"]
        assert row["sample_id"] == 3 * B + r and row["dataset_id"] == dataset_ids[r]
        ds = datasets[explained["datasets"][row["dataset_id"]]]
        tokens = np.concatenate([
            ds.get(p["sequence"], p["start"], p["stop"] - p["start"]) for p in row["pieces"]
        ]).astype(np.int64)
        assert tokens.size == SEQ + 1
        np.testing.assert_array_equal(tokens[:-1], inputs[r])
        np.testing.assert_array_equal(tokens[1:], targets[r])
        for p in row["pieces"]:
            doc = p["document"]
            assert ds.document_indices[doc] <= p["sequence"] < ds.document_indices[doc + 1]


def test_mixture_table_and_plot(data, tmp_path):
    _, _, args = data
    out = run("jaxblend.tools.inspect", "mixture", *args, f"--global_batch_size={B}",
              f"--plot={tmp_path / 'mix.png'}", f"--json={tmp_path / 'mix.json'}")
    result = json.loads((tmp_path / "mix.json").read_text())
    shares = {r["dataset"].rsplit("/", 1)[-1]: r for r in result["rows"]}
    assert shares["a"]["target"] == pytest.approx(0.25) and shares["b"]["target"] == pytest.approx(0.75)
    assert shares["a"]["realized"] == pytest.approx(0.25, abs=0.01)
    assert sum(r["samples"] for r in result["rows"]) == result["end_step"] * B
    assert (tmp_path / "mix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "realized" in out.stdout


def test_unknown_command_is_named_with_the_commands():
    out = run("jaxblend.tools.inspect", "stat", check=False)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: unknown command 'stat'; the commands are stats, explain, mixture, preflight, verify"
    ]


@pytest.mark.parametrize("flag", ["plot", "json"])
def test_output_in_a_missing_directory_names_the_directory(data, tmp_path, flag):
    _, _, args = data
    missing = tmp_path / "missing"
    out = run("jaxblend.tools.inspect", "mixture", *args, f"--global_batch_size={B}",
              f"--{flag}={missing / 'mix.out'}", check=False)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: --{flag}={missing / 'mix.out'}: directory {missing} does not exist"
    ]


def test_stats(data, tmp_path):
    _, prefixes, args = data
    run("jaxblend.tools.inspect", "stats", *args, f"--json={tmp_path / 's.json'}")
    stats = json.loads((tmp_path / "s.json").read_text())
    ds = IndexedDataset(prefixes[0])
    assert stats[prefixes[0]]["documents"] == ds.num_documents == 120
    assert stats[prefixes[0]]["tokens"] == int(ds.sequence_lengths.sum())
    assert sum(h["documents"] for h in stats[prefixes[0]]["histogram"]) == 120


def test_preflight_ok_then_cached(data, tmp_path):
    _, _, args = data
    out = run("jaxblend.tools.inspect", "preflight", *args, f"--global_batch_size={B}",
              "--vocab_size=900", f"--json={tmp_path / 'p.json'}")
    assert "preflight: ok" in out.stdout
    report = json.loads((tmp_path / "p.json").read_text())
    assert report["blend_sizes"]["train"] == 400 and report["problems"] == []
    # explain builds only the split it looks at: the train maps alone are not the whole plan.
    run("jaxblend.tools.inspect", "explain", *args, f"--global_batch_size={B}", "--step=0")
    out = run("jaxblend.tools.inspect", "preflight", *args, f"--global_batch_size={B}")
    assert "not cached" in out.stdout
    # Once every existing split has its maps, preflight finds them in the cache.
    run("jaxblend.tools.inspect", "explain", *args, f"--global_batch_size={B}", "--step=0", "--which=valid")
    out = run("jaxblend.tools.inspect", "preflight", *args, f"--global_batch_size={B}")
    assert "cached at" in out.stdout


def test_preflight_fails_fast_on_problems(data, tmp_path):
    _, _, args = data
    out = run("jaxblend.tools.inspect", "preflight", *args, "--vocab_size=70000", check=False)
    assert out.returncode == 1 and "cannot hold vocabulary 70000" in out.stdout
    out = run("jaxblend.tools.inspect", "preflight", f"--data_path={tmp_path / 'missing'}",
              f"--seq_length={SEQ}", check=False)
    assert out.returncode == 1 and "missing" in out.stdout



def test_rampup_preflight_shapes_and_explain(data, tmp_path):
    _, _, args = data
    ramp = ["--global_batch_size=32", "--rampup_batch_size=8 8 48"]  # steps of 8, 8, 16, 24, 32...
    out = run("jaxblend.tools.inspect", "preflight", *args, *ramp, "--train_iters=6",
              f"--json={tmp_path / 'p.json'}")
    assert "batch shapes: 4 (one compiled train step each; global batch sizes 8, 16, 24, 32)" in out.stdout
    assert json.loads((tmp_path / "p.json").read_text())["batch_shapes"] == 4
    out = run("jaxblend.tools.inspect", "preflight", *args, f"--global_batch_size={B}")
    assert "batch shapes: 1 " in out.stdout
    run("jaxblend.tools.inspect", "explain", *args, *ramp, "--step=3", f"--json={tmp_path / 'e.json'}")
    rows = json.loads((tmp_path / "e.json").read_text())["rows"]
    assert [r["sample_id"] for r in rows] == list(range(32, 56))  # after 8 + 8 + 16 samples

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.flags")))


def test_config_flagfiles_are_found():
    # The parametrization below must never become an empty (silently skipped) set.
    names = {os.path.basename(p) for p in CONFIGS}
    assert "demo.flags" in names, CONFIGS


@pytest.mark.parametrize("flagfile", CONFIGS, ids=os.path.basename)
def test_configs_parse_with_the_training_flags(flagfile):
    def show_seq_length(argv):
        print(flags.FLAGS.seq_length)

    def parse(argv):
        return cli.call(show_seq_length, argv, define=jaxblend.train.define_flags)

    # Flagfiles name each other relative to the repository root, where the README runs them.
    out = run_program(parse, [f"--flagfile={flagfile}"], cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) > 0


def test_build_index_fills_then_reuses_the_cache(data, tmp_path):
    _, _, args = data
    cache = tmp_path / "fresh_cache"
    args = [a for a in args if not a.startswith("--data_cache_path")] + [f"--data_cache_path={cache}"]
    first = run("jaxblend.tools.build_index", *args)
    assert "train: 400 samples" in first.stdout and "test: none" in first.stdout
    # Each dataset's share of the split (the blend's 25/75 draws), apart from its own size.
    train = next(line for line in first.stdout.splitlines() if "train:" in line)
    drawn, own = train.split("; drawn from each dataset (share of the split): ")[1].split(
        "; samples each dataset holds: ")
    assert drawn == "a 100 (25.0%), b 300 (75.0%)", train
    assert [part.split()[0] for part in own.split(", ")] == ["a", "b"], train
    assert all(int(part.split()[1].replace(",", "")) > 0 for part in own.split(", ")), train
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "manifest.json").exists()
    second = run("jaxblend.tools.build_index", *args)
    assert first.stdout.split(" (")[0] == second.stdout.split(" (")[0]  # same fingerprint and path
    missing = run("jaxblend.tools.build_index", *args[:-1], check=False)
    assert missing.returncode != 0 and "--data_cache_path is required" in missing.stderr


def test_preflight_and_build_index_catch_a_changed_cache(data, tmp_path):
    _, _, args = data
    cache = tmp_path / "cache"
    args = [a for a in args if not a.startswith("--data_cache_path")] + [f"--data_cache_path={cache}"]
    run("jaxblend.tools.build_index", *args)
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    target = entry / "train.shuffle_index.npy"
    original = target.read_bytes()
    changed = bytearray(original)
    changed[-3] ^= 0xFF  # same size, different bytes
    target.write_bytes(bytes(changed))
    out = run("jaxblend.tools.inspect", "preflight", *args, f"--global_batch_size={B}", check=False)
    assert out.returncode == 1 and "index cache entry is corrupt" in out.stdout
    assert "train.shuffle_index.npy" in out.stdout
    out = run("jaxblend.tools.build_index", *args)
    assert "corrupt" in out.stderr
    assert target.read_bytes() == original  # rebuilt, same bytes

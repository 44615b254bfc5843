"""`--packing=best_fit` through the tools and the training example, in-process: dump_batches,
inspect explain and preflight, train (with a resume)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend import IndexedDataset

B, SEQ, EOD = 8, 16, 127


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("packing_tools")
    rng = np.random.default_rng(8)
    prefixes = [
        write_random_dataset(str(root / n), rng, d, lengths=(1, 30), vocab=(0, EOD), eod=EOD)
        for n, d in (("a", 150), ("b", 200))
    ]
    args = [f"--data_path=30 {prefixes[0]} 70 {prefixes[1]}", "--split=90,10,0",
            f"--seq_length={SEQ}", "--train_samples=96", "--valid_samples=16",
            "--packing=best_fit", "--packing_window=64", f"--data_cache_path={root / 'cache'}",
            f"--global_batch_size={B}"]
    return root, prefixes, args


def run(module, *args):
    out = run_tool(module, [*args])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def test_explain_shows_the_documents_dump_batches_packs(data, tmp_path):
    _, _, args = data
    run("jaxblend.tools.dump_batches", *args, "--steps=1", "--start_step=2", f"--out={tmp_path}",
        "--mesh_shape=1,8", "--mesh_axes=data,tensor", "--inter_document_masking")
    out = run("jaxblend.tools.inspect", "explain", *args, "--step=2",
              f"--json={tmp_path / 'explain.json'}")
    explained = json.loads((tmp_path / "explain.json").read_text())
    with np.load(tmp_path / "batches.npz") as f:
        batch = {k: f[k][0] for k in f.files}
    datasets = {n: IndexedDataset(n) for n in explained["datasets"]}
    assert len(explained["rows"]) == B
    for row in explained["rows"]:
        r = row["row"]
        ds = datasets[explained["datasets"][row["dataset_id"]]]
        a = 0
        for j, p in enumerate(row["pieces"], start=1):
            n = p["stop"] - p["start"]
            tokens = ds.get(p["sequence"], p["start"], n).astype(np.int64)
            if a < SEQ:
                stop = min(a + n, SEQ)
                np.testing.assert_array_equal(batch["inputs"][r, a:stop], tokens[: stop - a])
                assert (batch["segment_ids"][r, a:stop] == j).all()
                assert batch["positions"][r, a] == 0
            if p["start"] == 0 and p["stop"] == ds.sequence_lengths[p["sequence"]]:
                assert n <= SEQ + 1  # a whole document
            a += n
        assert row["padding"] == SEQ + 1 - a
        assert int((batch["segment_ids"][r] == 0).sum()) == max(0, SEQ - a)
        assert f"+ {row['padding']} padding" in out.stdout


def test_preflight_reports_padding_and_split_documents(data, tmp_path):
    _, prefixes, args = data
    out = run("jaxblend.tools.inspect", "preflight", *args, f"--json={tmp_path / 'p.json'}")
    assert "packing best_fit (window 64 documents)" in out.stdout and "preflight: ok" in out.stdout
    report = json.loads((tmp_path / "p.json").read_text())
    train = {p["prefix"]: p for p in report["packing"] if p["split"] == "train"}
    for prefix in prefixes:
        lengths = IndexedDataset(prefix).sequence_lengths
        docs = lengths[: round(0.9 * len(lengths))]
        assert train[prefix]["split_documents"] == int((docs > SEQ + 1).sum())
        rows = train[prefix]["rows"]
        assert train[prefix]["padding"] == rows * (SEQ + 1) - int(docs.sum())
        assert 0 <= train[prefix]["padding_fraction"] < 0.05


def test_train_on_packed_rows_counts_the_tokens_of_the_batches_and_resumes(data, tmp_path):
    _, prefixes, args = data
    metrics = tmp_path / "metrics.jsonl"
    model = [f"--eod_id={EOD}", "--vocab_size=128", "--hidden_size=32", "--ffn_hidden_size=64",
             "--num_layers=1", "--num_attention_heads=2", "--log_interval=1",
             "--save_interval=3", "--eval_interval=0", f"--workdir={tmp_path / 'run'}",
             f"--metrics_jsonl={metrics}"]
    run("jaxblend.train", *args, *model, "--train_iters=3")
    resumed = run("jaxblend.train", *args, *model, "--train_iters=5").stdout
    assert re.search(r"resumed from .*step 3", resumed), resumed[-2000:]
    run("jaxblend.tools.dump_batches", *args, f"--eod_id={EOD}", "--steps=5",
        f"--out={tmp_path / 'dump'}")
    with np.load(tmp_path / "dump" / "batches.npz") as f:
        ids, mask = f["dataset_ids"], f["loss_mask"]
    records = {
        r["step"]: r for r in map(json.loads, metrics.read_text().splitlines())
        if r["kind"] == "train"
    }
    assert sorted(records) == [1, 2, 3, 4, 5]
    row_tokens = mask.sum(-1).astype(np.int64)
    for step, record in records.items():
        want = [int(row_tokens[:step][ids[:step] == j].sum()) for j in (0, 1)]
        assert [record["datasets"][p]["tokens"] for p in prefixes] == want, step


def test_dump_samples_writes_each_datasets_packed_rows(data, tmp_path):
    _, prefixes, args = data
    run("jaxblend.tools.dump_samples", *args, "--num=20", f"--out={tmp_path}")
    with np.load(tmp_path / "train.npz") as f:
        arrays = {k: f[k] for k in f.files}
    assert not any(k.endswith("document_index") for k in arrays)
    for j, prefix in enumerate(prefixes):
        starts, sequence = arrays[f"ds{j}_packed_starts"], arrays[f"ds{j}_packed_sequence"]
        lengths = arrays[f"ds{j}_packed_length"]
        assert starts[0] == 0 and starts[-1] == len(sequence) == len(lengths)
        assert int(arrays[f"ds{j}_packed_epoch_rows"].sum()) == len(starts) - 1
        assert np.diff(starts).min() >= 1 and lengths.max() <= SEQ + 1
    text = arrays["samples_text"]
    assert text.shape == (20, SEQ + 1)
    datasets = [IndexedDataset(p) for p in prefixes]
    for r in range(20):
        j, q = int(arrays["dataset_index"][r]), int(arrays["dataset_sample_index"][r])
        q = int(arrays[f"ds{j}_packed_order"][q])  # sample q's row
        starts = arrays[f"ds{j}_packed_starts"]
        want = np.concatenate([
            datasets[j].get(int(arrays[f"ds{j}_packed_sequence"][p]),
                            int(arrays[f"ds{j}_packed_offset"][p]),
                            int(arrays[f"ds{j}_packed_length"][p]))
            for p in range(starts[q], starts[q + 1])
        ])
        assert text[r, : want.size].tolist() == want.tolist()
        assert (text[r, want.size :] == -1).all()

"""dump_samples CLI: flags -> npz, checked against megatron-core."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from helpers_cli import run_tool

import jaxblend

megatron = pytest.importorskip("megatron.core")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "index"))
import index_parity_helpers as H

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write(prefix: str, rng: np.random.Generator, n: int) -> str:
    with jaxblend.IndexedDatasetBuilder(prefix, dtype=np.uint16) as builder:
        for _ in range(n):
            tokens = rng.integers(1, 1000, int(rng.integers(1, 50)))
            builder.add_sequence(tokens)
            builder.end_document()
    return prefix


@pytest.mark.parity
def test_dump_samples_matches_megatron(tmp_path):
    rng = np.random.default_rng(0)
    a = _write(str(tmp_path / "a"), rng, 200)
    b = _write(str(tmp_path / "b"), rng, 90)
    out = tmp_path / "out"
    cmd = [
        # Megatron-LM's own spelling of its data arguments, verbatim
        *("--data-path", "30", a, "70", b),
        *("--split", "90,8,2", "--seq-length", "9", "--seed", "77"),
        *("--train-samples", "300", "--valid-samples", "20", "--test-samples", "5"),
        *("--data-cache-path", str(tmp_path / "cache")),
        "--num=12",
        f"--out={out}",
    ]
    run_tool("jaxblend.tools.dump_samples", cmd, check=True, cwd=REPO)
    theirs = H.megatron_build(
        blend=["30", a, "70", b], split="90,8,2", seq_length=9, seed=77, num_samples=(300, 20, 5)
    )
    for name, dataset in zip(("train", "valid", "test"), theirs):
        got = np.load(out / f"{name}.npz")
        H.assert_same_array(got["dataset_index"], dataset.dataset_index, "dataset_index")
        H.assert_same_array(got["dataset_sample_index"], dataset.dataset_sample_index, "dsi")
        for j, ds in enumerate(dataset.datasets):
            for key in ("document_index", "sample_index", "shuffle_index"):
                H.assert_same_array(got[f"ds{j}_{key}"], getattr(ds, key), f"ds{j}_{key}")
        text = got["samples_text"]
        assert text.dtype == np.int64 and text.shape == (min(12, len(dataset)), 10)
        for i in range(text.shape[0]):
            np.testing.assert_array_equal(text[i], H.megatron_window(dataset, i))
    assert sorted(os.listdir(out)) == ["test.npz", "train.npz", "valid.npz"]


"""The demo's fill-in-the-middle + packing flagfile (configs/demo_fim_packing.flags): it trains on
the built-in corpus with the byte tokenizer's FIM sentinels, and its batches are packed rows whose
documents are rewritten around those sentinels (dump_batches with the same flagfile)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers_cli import run_tool

from jaxblend.preprocess.tokenizers import ByteTokenizer
from jaxblend.training import corpus

pytestmark = pytest.mark.slow

SMALL = [
    "--flagfile=configs/demo_fim_packing.flags", "--default_corpus_mb=0.25", "--seq_length=64",
    "--global_batch_size=8", "--hidden_size=64", "--ffn_hidden_size=128", "--num_layers=1",
    "--log_interval=5", "--eval_interval=0", "--lr_warmup_iters=5", "--train_samples=400",
]


def test_demo_fim_packing_flagfile_trains_and_its_batches_hold_fim_documents(tmp_path):
    out = run_tool("jaxblend.train", [*SMALL, f"--workdir={tmp_path}", "--train_iters=15",
                                      "--save_interval=0"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    curve = {int(s): float(v) for s, v in re.findall(r"step\s+(\d+)\s+loss\s+([0-9.]+)", out.stdout)}
    assert sorted(curve) == [1, 5, 10, 15] and curve[15] < curve[1] - 0.5, curve
    assert "tokenizer ByteTokenizer (vocab 267)" in out.stdout
    corpus_dir = tmp_path / f"corpus-v{corpus.VERSION}-250000"
    blend = " ".join(f"1 {corpus_dir / n}_text_document" for n in corpus.DATASETS)
    dumped = run_tool("jaxblend.tools.dump_batches", [
        *SMALL, f"--data_path={blend}", "--steps=2", f"--out={tmp_path / 'dump'}",
    ])
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    with np.load(tmp_path / "dump" / "batches.npz") as f:
        inputs, segments, positions = f["inputs"], f["segment_ids"], f["positions"]
    byte = ByteTokenizer()
    starts = positions == 0  # each document's first token (packed: positions per document)
    prefix = byte.token_to_id("<fim_prefix>")
    rewritten = inputs[starts & (segments > 0)] == prefix
    assert 0.2 < rewritten.mean() < 0.8, rewritten.mean()  # --fim_rate=0.5, per document
    for name in ("<fim_middle>", "<fim_suffix>"):  # one each per rewrite, unless cut off
        assert 0.8 * rewritten.sum() <= (inputs == byte.token_to_id(name)).sum() <= rewritten.sum()
    assert (inputs < byte.vocab_size).all()

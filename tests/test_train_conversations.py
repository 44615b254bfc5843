"""The training example on conversations blended with text: packed rows, the stored loss masks
applied, the tokens trained per dataset equal to the batches' `loss_mask` (dump_batches)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_cli import run_tool

from jaxblend.preprocess import pipeline
from tests.helpers_chat import chat_dataset
from tests.preprocess.conftest import make_documents, small_run_config, write_jsonl

pytestmark = pytest.mark.slow


def test_train_on_conversations_counts_only_the_trained_tokens(tmp_path):
    chat, spec = chat_dataset(tmp_path, 60)
    text = pipeline.preprocess(small_run_config(
        str(tmp_path / "web"), [write_jsonl(str(tmp_path / "web.jsonl"), make_documents(80))],
        tokenizer=spec,
    )).outputs["text"]
    data = [f"--data_path=50 {chat} 50 {text}", "--split=100,0,0", "--seq_length=64",
            "--train_samples=48", "--packing=best_fit", "--packing_overflow=truncate",
            f"--data_cache_path={tmp_path / 'cache'}", "--global_batch_size=8"]
    metrics = tmp_path / "metrics.jsonl"
    out = run_tool("jaxblend.train", [
        *data, "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1",
        "--num_attention_heads=2", "--log_interval=1", "--eval_interval=0", "--train_iters=4",
        f"--workdir={tmp_path / 'run'}", f"--metrics_jsonl={metrics}",
    ])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    dumped = run_tool("jaxblend.tools.dump_batches", [*data, "--steps=4",
                                                      f"--out={tmp_path / 'dump'}"])
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    with np.load(tmp_path / "dump" / "batches.npz") as f:
        ids, mask = f["dataset_ids"], f["loss_mask"]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    last = next(r for r in records if r["kind"] == "train" and r["step"] == 4)
    tokens = [last["datasets"][p]["tokens"] for p in (chat, text)]
    assert tokens == [int(mask[ids == j].sum()) for j in (0, 1)]
    rows = [int((ids == j).sum()) for j in (0, 1)]
    assert 0 < tokens[0] / rows[0] < tokens[1] / rows[1]  # conversations: assistant tokens only

"""The training example's loader telemetry: the `loader:` line after its log lines, the `"loader"` figures
of `--metrics_jsonl`, `--metrics_port` (served during the run; a port in use is one line)."""

from __future__ import annotations

import json
import re
import socket

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

pytestmark = pytest.mark.slow

MODEL = ["--vocab_size=128", "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1",
         "--num_attention_heads=2", "--eval_interval=0", "--global_batch_size=8",
         "--seq_length=16"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    root = tmp_path_factory.mktemp("telemetry-train")
    rng = np.random.default_rng(3)
    a, b = (write_random_dataset(str(root / n), rng, 150, lengths=(2, 40), vocab=(0, 127),
                                 eod=127) for n in ("a", "b"))
    return root, a, b


def test_log_lines_and_metrics_jsonl_carry_the_loaders_figures(blend, tmp_path):
    root, a, b = blend
    metrics = tmp_path / "metrics.jsonl"
    out = run_tool("jaxblend.train", [
        f"--data_path=50 {a} 50 {b}", "--split=100,0,0", "--train_samples=64", "--eod_id=127",
        f"--data_cache_path={root / 'cache'}", *MODEL, "--log_interval=2", "--train_iters=4",
        f"--workdir={tmp_path / 'run'}", f"--metrics_jsonl={metrics}",
        f"--metrics_port={_free_port()}", "--stall_threshold=30",
    ])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert re.search(r"^step\s+4  loader: local [0-9.]+ [kM]B/s, ahead \d+$", out.stdout,
                     re.MULTILINE), out.stdout[-2000:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    loader = {r["step"]: r["loader"] for r in records if r["kind"] == "train"}
    assert sorted(loader) == [1, 2, 4]
    window = (16 + 1) * 2  # bytes of a row's token window (uint16)
    # each record covers its window: the batches delivered since the previous line
    assert [loader[s]["steps"] for s in (1, 2, 4)] == [1, 1, 2]
    assert [loader[s]["tokens"] for s in (1, 2, 4)] == [8 * 16, 8 * 16, 2 * 8 * 16]
    read = sum(loader[s]["stores"]["local"]["bytes"] for s in (1, 2, 4))
    assert read % window == 0 and read >= 4 * 8 * window  # read ahead of the steps trained
    assert set().union(*(loader[s]["dataset_bytes"] for s in (1, 2, 4))) == {a, b}
    assert all(loader[s]["stalls"] == 0 and loader[s]["wait_seconds"] >= 0 for s in loader)


def test_metrics_port_in_use_is_one_line(blend, tmp_path):
    root, a, _ = blend
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_tool("jaxblend.train", [
            f"--data_path={a}", "--split=100,0,0", "--train_samples=64", "--eod_id=127",
            f"--data_cache_path={root / 'cache'}", *MODEL, "--train_iters=2",
            f"--workdir={tmp_path / 'run'}", f"--metrics_port={port}",
        ])
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: --metrics_port: cannot serve loader metrics on "
                                f"127.0.0.1:{port} "), out.stderr[-3000:]
    assert "step" not in out.stdout

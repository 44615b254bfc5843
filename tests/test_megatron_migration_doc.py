"""Runs every command of docs/megatron_migration.md, in order, on generated data."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.preprocess.conftest import make_documents

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "megatron_migration.md")


def _blocks() -> list[tuple[str, str]]:
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    return re.findall(r"```(bash|python)\n(.*?)```", text, flags=re.DOTALL)


@pytest.mark.parity
@pytest.mark.slow
def test_every_documented_command_runs_and_the_check_passes(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    pytest.importorskip("megatron.core")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    docs = make_documents(400, seed=2, max_sentences=6) + ["", "\n"]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        docs,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<|endoftext|>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    (tmp_path / "tok").mkdir()
    bpe.save(str(tmp_path / "tok" / "tokenizer.json"))
    env = dict(
        os.environ,
        PYTHONPATH=ROOT,
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        TOKENIZER_DIR=str(tmp_path / "tok"),
        EOD_ID=str(bpe.token_to_id("<|endoftext|>")),
        PAD_ID=str(bpe.token_to_id("<pad>")),
        JAX_PLATFORMS="cpu",
    )
    blocks = _blocks()
    assert [kind for kind, _ in blocks] == ["bash", "python", "bash", "bash", "python"]
    out = ""
    for kind, code in blocks:
        cmd = (
            ["bash", "-euo", "pipefail", "-c", code]
            if kind == "bash"
            else [sys.executable, "-c", code]
        )
        r = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert r.returncode == 0, f"{kind} block failed:\n{code}\n{r.stderr[-3000:]}"
        out = r.stdout
    assert "index maps and batches equal Megatron's" in out

"""The run record carries the tokenizer's facts (identity, vocabulary, EOD and pad ids, the largest
token id of each output), and the CLI prints the ids it used."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from helpers_cli import run_tool

from jaxblend.preprocess import layout, pipeline, tokenizers
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.tokenizer_facts import read_facts
from tests.preprocess.conftest import read_bytes, small_run_config, write_jsonl

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_record_holds_eod_pad_vocab_and_largest_id(tmp_path, tokenizer_files, corpus_docs):
    src = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs[:40])
    spec = tok_spec.TokenizerSpec(**tokenizer_files["hf_bpe"])
    result = pipeline.preprocess(small_run_config(str(tmp_path / "o"), [src], tokenizer=spec))
    tok = tokenizers.load_tokenizer(spec)
    record = layout.read_json(layout.manifest_path(str(tmp_path / "o")))
    facts = record["tokenizer_facts"]
    assert facts["vocab_size"] == tok.vocab_size == 400
    assert facts["eod_id"] == tok.eod == 0 and facts["pad_id"] == tok.pad == 1
    assert facts["identity"].startswith("HuggingFaceTokenizer sha256:")
    assert result.tokenizer == facts
    tokens = np.frombuffer(read_bytes(str(tmp_path / "o_text_document"))[0], np.uint16)
    assert record["max_token_id"] == {"text": int(tokens.max())}

    read = read_facts(str(tmp_path / "o_text_document"))
    assert (read.vocab_size, read.eod_id, read.pad_id) == (400, 0, 1)
    assert read.max_token_id == int(tokens.max())


def test_same_files_elsewhere_are_the_same_identity(tmp_path, tokenizer_files):
    spec = tok_spec.TokenizerSpec(**tokenizer_files["hf_bpe"])
    copy = tmp_path / "copy.json"
    copy.write_bytes(Path(spec.model).read_bytes())
    moved = tok_spec.TokenizerSpec(type="hf", model=str(copy))
    tok = tokenizers.load_tokenizer(spec)
    assert tok_spec.facts_of(spec, tok).identity == tok_spec.facts_of(moved, tok).identity
    other = tok_spec.TokenizerSpec(**tokenizer_files["hf_wordpiece"])
    assert tok_spec.facts_of(other, tok).identity != tok_spec.facts_of(spec, tok).identity
    byte = tok_spec.TokenizerSpec(type="byte")
    assert tok_spec.facts_of(byte, tokenizers.ByteTokenizer()).identity == "ByteTokenizer"


def test_cli_prints_the_ids_it_used(tmp_path, tokenizer_files, corpus_docs):
    src = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs[:20])
    out = run_tool("jaxblend.tools.preprocess", [f"--input={src}",
         f"--output_prefix={tmp_path / 'o'}", "--tokenizer-type", "HuggingFaceTokenizer",
         "--tokenizer-model", tokenizer_files["hf_bpe"]["model"], "--append-eod", "--workers=1",
         "--noprogress"], cwd=_ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "tokenizer HuggingFaceTokenizer (vocab 400): eod 0, pad 1" in out.stdout.splitlines()
    byte = run_tool("jaxblend.tools.preprocess", [f"--input={src}",
         f"--output_prefix={tmp_path / 'b'}", "--tokenizer-type", "ByteTokenizer", "--workers=1",
         "--noprogress"], cwd=_ROOT)
    assert byte.returncode == 0, byte.stderr[-2000:]
    record = json.loads((tmp_path / ".jaxblend" / "b.preprocess.json").read_text())
    line = f"tokenizer ByteTokenizer (vocab {record['tokenizer_facts']['vocab_size']}): eod 256"
    assert any(s.startswith(line) for s in byte.stdout.splitlines()), byte.stdout

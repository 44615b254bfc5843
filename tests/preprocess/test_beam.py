"""Apache Beam engine (DirectRunner): byte-identical to the local pipeline."""

from __future__ import annotations

import gzip
import json

import pytest
from helpers_cli import run_tool

from jaxblend.preprocess import config as config_lib
from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from tests.preprocess.conftest import read_bytes, write_jsonl

beam_engine = pytest.importorskip("jaxblend.preprocess.beam", reason="needs the beam extra")


def test_beam_direct_runner_matches_local(tmp_path, tokenizer_files, corpus_docs):
    a = write_jsonl(str(tmp_path / "a.jsonl"), corpus_docs[:150])
    b = tmp_path / "b.jsonl.gz"
    b.write_bytes(
        gzip.compress("".join(json.dumps({"text": d}) + "\n" for d in corpus_docs[150:]).encode())
    )
    spec = tok_spec.TokenizerSpec(**tokenizer_files["sentencepiece"])
    outs = {}
    for name, engine in (
        ("local", None),
        ("beam", beam_engine.BeamEngine(["--runner=DirectRunner"])),
    ):
        cfg = config_lib.PreprocessConfig(
            input=(a, str(b)),
            output_prefix=str(tmp_path / name / "c"),
            tokenizer=spec,
            append_eod=True,
            split_sentences=True,
            sentence_splitter="builtin",
            partitions=4,
            workers=1,
            progress=False,
        )
        outs[name] = pipeline.preprocess(cfg, engine)
    assert read_bytes(outs["beam"].outputs["text"]) == read_bytes(outs["local"].outputs["text"])
    assert outs["beam"].keys == outs["local"].keys and outs["beam"].keys["text"]["documents"] == 300


def test_cli_engine_beam(tmp_path, corpus_docs):

    from tests.preprocess.test_resume_cli import _ROOT

    src = write_jsonl(str(tmp_path / "a.jsonl"), corpus_docs[:60])
    local = pipeline.preprocess(
        config_lib.PreprocessConfig(
            input=(src,),
            output_prefix=str(tmp_path / "local" / "c"),
            append_eod=True,
            partitions=3,
            workers=1,
            progress=False,
        )
    )
    proc = run_tool("jaxblend.tools.preprocess", [f"--input={src}",
            f"--output_prefix={tmp_path / 'beam' / 'c'}",
            "--tokenizer_type=byte",
            "--append_eod",
            "--partitions=3",
            "--engine=beam",
            "--beam_options=--runner=DirectRunner",
            "--noprogress"], cwd=_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "60 documents" in proc.stdout
    beam_out = str(tmp_path / "beam" / "c_text_document")
    assert read_bytes(beam_out) == read_bytes(local.outputs["text"])

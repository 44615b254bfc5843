"""The cleaning stage on Apache Beam (DirectRunner): the same bytes as the local engine."""

from __future__ import annotations

import json

import pytest

from tests.preprocess.cleaning.corpus import make_corpus
from tests.preprocess.cleaning.test_pipeline import _run, _texts
from tests.preprocess.conftest import read_bytes

beam_engine = pytest.importorskip("jaxblend.preprocess.beam", reason="needs the beam extra")


def test_beam_cleaning_matches_local(tmp_path):
    corpus = make_corpus(seed=2, good=30)
    src = corpus.write(str(tmp_path / "c.jsonl"))
    ev = tmp_path / "eval.jsonl"
    ev.write_text("".join(json.dumps({"text": t}) + "\n" for t in corpus.eval_texts))
    local = _run(src, str(ev), str(tmp_path / "local" / "c"), partitions=3)
    beam = _run(
        src,
        str(ev),
        str(tmp_path / "beam" / "c"),
        partitions=3,
        engine=beam_engine.BeamEngine(["--runner=DirectRunner"]),
    )
    assert _texts(local.outputs["text"]) == corpus.expected_kept()
    assert read_bytes(beam.outputs["text"]) == read_bytes(local.outputs["text"])
    assert beam.dropped == local.dropped
    assert beam.cleaning["dedup"]["engine"] == "beam"  # the join ran as a Beam pipeline
    for k in ("exact_duplicates", "near_duplicates", "near_candidates", "records_signed"):
        assert beam.cleaning["dedup"][k] == local.cleaning["dedup"][k], k

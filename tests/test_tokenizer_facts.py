"""Reading a dataset's recorded tokenizer facts (local and bucket), blends of tokenizers, and the
id checks against the model vocabulary."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from jaxblend import storage
from jaxblend.access import DataAccess
from jaxblend.tokenizer_facts import (
    TokenizerFacts,
    TokenizerMismatchError,
    blend_facts,
    check_ids,
    legacy_record_path,
    read_facts,
    record_candidates,
    record_path,
    record_paths,
    side_path,
)
from tests.helpers_data import write_random_dataset

HF = TokenizerFacts("HuggingFaceTokenizer sha256:0123456789ab", 1000, 0, None)
BYTE = TokenizerFacts("ByteTokenizer", 267, 256, 257)


def _record(output_prefix, key: str, facts: TokenizerFacts | None, max_id: int | None = None) -> str:
    """Writes the record `jaxblend.tools.preprocess` leaves for `<output_prefix>_<key>_document`."""
    name = f"{output_prefix}_{key}_document"
    record = {"status": "complete", "outputs": {key: name}}
    if facts is not None:
        record["tokenizer_facts"] = facts.to_json()
        record["max_token_id"] = {} if max_id is None else {key: max_id}
    with open(f"{output_prefix}.preprocess.json", "w") as f:
        json.dump(record, f)
    return name


def test_side_files_and_record_paths():
    assert side_path("/d/corpus", ".cleaning.json") == "/d/.jaxblend/corpus.cleaning.json"
    assert record_path("/d/corpus") == "/d/.jaxblend/corpus.preprocess.json"
    assert record_path("gs://b/tok/web") == "gs://b/tok/.jaxblend/web.preprocess.json"
    assert record_path("corpus") == ".jaxblend/corpus.preprocess.json"
    assert legacy_record_path("/d/corpus") == "/d/corpus.preprocess.json"
    assert record_paths("/d/my_corpus_text_document") == [  # new place first, for each candidate
        "/d/.jaxblend/my_corpus.preprocess.json", "/d/my_corpus.preprocess.json",
        "/d/.jaxblend/my.preprocess.json", "/d/my.preprocess.json",
    ]
    assert record_paths("/d/corpus") == []


def test_the_record_in_jaxblend_dir_comes_before_one_beside_the_data(tmp_path):
    """`_record` writes where runs before wrote it; the `.jaxblend/` record, when present, wins."""
    name = _record(str(tmp_path / "c"), "text", HF)
    assert read_facts(name) == HF
    os.makedirs(tmp_path / ".jaxblend")
    os.replace(tmp_path / "c.preprocess.json", tmp_path / ".jaxblend" / "c.preprocess.json")
    _record(str(tmp_path / "c"), "text", BYTE)
    assert read_facts(name) == HF


def test_record_candidates():
    assert record_candidates("/d/corpus_text_document") == ["/d/corpus"]
    assert record_candidates("/d/my_corpus_raw_text_sentence") == [
        "/d/my_corpus_raw", "/d/my_corpus", "/d/my",
    ]
    assert record_candidates("/d/corpus") == []  # not a preprocessing output name
    assert record_candidates("/d_x/a_document") == []  # never outside the dataset's directory


def test_read_facts_of_a_recorded_dataset_and_none_without(tmp_path):
    name = _record(tmp_path / "my_corpus", "raw_text", HF, max_id=998)
    assert read_facts(name) == TokenizerFacts(HF.identity, 1000, 0, None, max_token_id=998)
    assert read_facts(str(tmp_path / "megatron_text_document")) is None  # no record
    old = _record(tmp_path / "old", "text", None)  # a record made before the facts were
    assert read_facts(old) is None
    other = tmp_path / "o.preprocess.json"  # a record of another run, same stem
    other.write_text(json.dumps({"outputs": {"text": "/elsewhere/o_title_document"},
                                 "tokenizer_facts": HF.to_json()}))
    assert read_facts(str(tmp_path / "o_text_document")) is None


def test_a_broken_record_is_one_line_naming_it(tmp_path):
    (tmp_path / "c.preprocess.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"c\.preprocess\.json: not a preprocessing record"):
        read_facts(str(tmp_path / "c_text_document"))


def test_read_facts_from_a_bucket():
    kv = storage.open_kvstore("memory://facts-bucket/")
    record = {"outputs": {"text": "/local/run/c_text_document"}, "tokenizer_facts": BYTE.to_json(),
              "max_token_id": {"text": 256}}
    kv.write("data/c.preprocess.json", json.dumps(record).encode()).result()
    facts = read_facts("memory://facts-bucket/data/c_text_document", DataAccess())
    assert facts == TokenizerFacts("ByteTokenizer", 267, 256, 257, max_token_id=256)
    assert read_facts("memory://facts-bucket/data/d_text_document", DataAccess()) is None
    record["tokenizer_facts"] = HF.to_json()
    record["outputs"] = {"text": "/local/run/h_text_document"}
    kv.write("data/h.preprocess.json", json.dumps(record).encode()).result()
    with pytest.raises(TokenizerMismatchError, match="ByteTokenizer"):  # read concurrently
        blend_facts(["memory://facts-bucket/data/c_text_document",
                     "memory://facts-bucket/data/h_text_document"], DataAccess())


def test_blend_of_tokenizers_refused_unless_allowed(tmp_path):
    a = _record(tmp_path / "a", "text", HF, 5)
    b = _record(tmp_path / "b", "text", BYTE, 6)
    c = _record(tmp_path / "c", "text", HF, 7)
    assert set(blend_facts([a, c])) == {a, c}
    with pytest.raises(TokenizerMismatchError) as err:
        blend_facts([a, c, b])
    assert str(err.value) == (
        f"datasets {a} ({HF.identity}) and {b} (ByteTokenizer) were tokenized by different "
        "tokenizers; train on data of one tokenizer, or pass --allow_mixed_tokenizers"
    )
    assert set(blend_facts([a, b], allow_mixed=True)) == {a, b}
    megatron = str(tmp_path / "m_text_document")
    assert set(blend_facts([a, megatron])) == {a}  # no record: unknown, not a mismatch
    assert blend_facts([a, megatron], fallback=HF)[megatron] == HF
    with pytest.raises(TokenizerMismatchError, match="ByteTokenizer"):
        blend_facts([a, megatron], fallback=BYTE)


def test_ids_outside_the_vocabulary_are_refused(tmp_path):
    with pytest.raises(TokenizerMismatchError) as err:
        check_ids(200, 256, None, {})
    assert str(err.value) == (
        "--eod_id=256 is outside the model vocabulary (--vocab_size=200): ids must be in [0, 200)"
    )
    with pytest.raises(TokenizerMismatchError, match="--pad_id=-1 is outside"):
        check_ids(200, 0, -1, {})
    check_ids(257, 256, None, {})
    a = _record(tmp_path / "a", "text", BYTE, 256)
    facts = blend_facts([a])
    check_ids(257, None, None, facts)
    with pytest.raises(TokenizerMismatchError) as err:
        check_ids(256, None, None, facts)
    assert str(err.value) == (
        f"dataset {a} holds token id 256 >= the model vocabulary (--vocab_size=256); raise "
        "--vocab_size to at least 257 or use data of the model's tokenizer"
    )


def test_a_record_without_the_largest_id_is_scanned_and_says_so(tmp_path):
    name = _record(tmp_path / "s", "text", BYTE)  # facts, but no max_token_id
    write_random_dataset(name, np.random.default_rng(0), 30, vocab=(0, 300))
    lines = []
    with pytest.raises(TokenizerMismatchError, match="holds token id 299 >= "):
        check_ids(263, None, None, blend_facts([name]), log=lines.append)
    assert lines == [f"{name}: its record has no largest token id; reading the data to find it"]

"""Tokenizer ids equal megatron-core's for the same files (the classes preprocess_data.py builds).

The oracle is ``megatron.core.tokenizers.text.utils.build_tokenizer.build_tokenizer``, the function
Megatron-LM's ``tools/preprocess_data.py`` calls (core_v0.16.1), given the same arguments. Files are
generated here; nothing is downloaded. (Megatron's HuggingFace and GPT2BPE types need the
``transformers`` package, which is not a dependency; those are compared through the corpus tests.)
"""

from __future__ import annotations

import argparse
import base64
import json

import numpy as np
import pytest

from jaxblend.preprocess import config as config_lib
from jaxblend.preprocess import pipeline
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as tok_lib
from tests.preprocess.conftest import make_documents, read_bytes
from tests.preprocess.test_megatron_parity import megatron_reference

pytestmark = pytest.mark.parity

_TEXTS = [
    "the theme of the thing",
    "Hello  world\n\twith   extra spaces ",
    "東京 café naïve ümlaut 42 3.14",
    "special <s> and </s> and <pad> inside",
    "",
    " ",
]


def _megatron_tokenizer(**kw):
    pytest.importorskip("megatron.core")
    from megatron.core.tokenizers.text.utils.build_tokenizer import build_tokenizer

    args = {
        "tokenizer_type": None,
        "tokenizer_model": None,
        "vocab_file": None,
        "merge_file": None,
        "tokenizer_special_tokens": None,
        "tokenizer_hf_use_fast": False,
        "trust_remote_code": False,
        "tokenizer_hf_include_special_tokens": False,
        "tokenizer_sentencepiece_legacy": False,
        "tiktoken_pattern": None,
        "vocab_size": None,
        "tiktoken_num_special_tokens": 1000,
        "tokenizer_metadata": None,
    }
    args.update(kw)
    return build_tokenizer(argparse.Namespace(**args))


def _tiktoken_json(path) -> int:
    merges = [b"th", b"he", b"the", b" t", b" the", b"in", b"ing", b"e ", b"  "]
    tokens = [bytes([i]) for i in range(256)] + merges
    vocab = [
        {"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": t.decode("latin-1")}
        for i, t in enumerate(tokens)
    ]
    path.write_text(json.dumps(vocab))
    return len(vocab)


def _same(ours, theirs, texts=_TEXTS):
    for text in texts:
        assert ours.tokenize(text).tolist() == list(theirs.tokenize(text)), text
    flat, lengths = ours.tokenize_batch(texts)
    assert flat.tolist() == [i for t in texts for i in theirs.tokenize(t)]
    assert lengths.tolist() == [len(theirs.tokenize(t)) for t in texts]
    assert ours.eod == theirs.eod and ours.vocab_size == theirs.vocab_size


@pytest.mark.parametrize(
    "kind", ["SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer"]
)
def test_sentencepiece_types(kind, tokenizer_files):
    model = tokenizer_files["sentencepiece"]["model"]
    ours = tok_lib.load_tokenizer(tok_spec.TokenizerSpec(type=kind, model=model))
    theirs = _megatron_tokenizer(tokenizer_type=kind, tokenizer_model=model)
    _same(ours, theirs)
    assert ours.pad == theirs.pad and ours.bos == theirs.bos


@pytest.mark.parametrize("pattern", ["v1", "v2"])
@pytest.mark.parametrize("num_special", [1000, 16])
def test_tiktokenizer_json_vocabulary(tmp_path, pattern, num_special):
    path = tmp_path / "tokenizer.json"
    n = _tiktoken_json(path)
    spec = tok_spec.TokenizerSpec(
        type="TikTokenizer",
        model=str(path),
        tiktoken_pattern=pattern,
        tiktoken_num_special_tokens=num_special,
        vocab_size=n + num_special,
    )
    ours = tok_lib.load_tokenizer(spec)
    theirs = _megatron_tokenizer(
        tokenizer_type="TikTokenizer",
        tokenizer_model=str(path),
        tiktoken_pattern=pattern,
        tiktoken_num_special_tokens=num_special,
        vocab_size=n + num_special,
    )
    _same(ours, theirs)
    assert ours.pad == theirs.pad
    assert min(ours.tokenize("the theme")) >= num_special  # ids shifted past the specials
    # a directory holding tokenizer.json works as --tokenizer_model too
    spec_dir = tok_spec.TokenizerSpec(
        type="TikTokenizer",
        model=str(tmp_path),
        tiktoken_pattern=pattern,
        tiktoken_num_special_tokens=num_special,
        vocab_size=n + num_special,
    )
    assert tok_lib.load_tokenizer(spec_dir).tokenize("the theme").tolist() == list(
        theirs.tokenize("the theme")
    )


def _assert_preprocessing_matches(tmp_path, src, spec, theirs):
    """A preprocessing run over the jsonl `src` equals Megatron's rules driven by `theirs`."""
    res = pipeline.preprocess(
        config_lib.PreprocessConfig(
            input=(str(src),), output_prefix=str(tmp_path / "jb" / "c"), tokenizer=spec,
            append_eod=True, workers=1, progress=False,
        )
    )
    ref = megatron_reference(
        src.read_text().splitlines(keepends=True), ["text"], theirs.tokenize, theirs.eod,
        theirs.vocab_size, str(tmp_path / "mg"),
    )
    assert read_bytes(res.outputs["text"]) == read_bytes(ref["text"])
    return res


def test_null_tokenizer(tmp_path):
    ours = tok_lib.load_tokenizer(tok_spec.TokenizerSpec(type="NullTokenizer", vocab_size=100))
    theirs = _megatron_tokenizer(tokenizer_type="NullTokenizer", vocab_size=100)
    texts = ["1 2 3", "99", "0 0 7 42"]
    _same(ours, theirs, texts)
    # End to end: a preprocessing run over NullTokenizer text equals the Megatron rules' output.
    recs = [{"text": t} for t in texts]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    spec = tok_spec.TokenizerSpec(type="NullTokenizer", vocab_size=100)
    _assert_preprocessing_matches(tmp_path, path, spec, theirs)


def test_tiktoken_corpus_matches_megatron_rules(tmp_path):
    path = tmp_path / "tokenizer.json"
    n = _tiktoken_json(path)
    theirs = _megatron_tokenizer(
        tokenizer_type="TikTokenizer", tokenizer_model=str(path), vocab_size=n + 1000
    )
    docs = make_documents(60, seed=9) + ["", "\n", " the "]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    spec = tok_spec.TokenizerSpec(type="TikTokenizer", model=str(path), vocab_size=n + 1000)
    res = _assert_preprocessing_matches(tmp_path, src, spec, theirs)
    assert np.dtype(res.dtype) == np.uint16

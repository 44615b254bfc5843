"""Tokenizer adapters: vocab sizes, special ids, batch == single, clear errors for bad files."""

from __future__ import annotations

import numpy as np
import pytest

from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as tok_lib

_KINDS = ["byte", "hf_bpe", "gpt2", "hf_wordpiece", "sentencepiece", "tiktoken"]


@pytest.mark.parametrize("kind", _KINDS)
def test_batch_matches_single_and_ids_in_vocab(kind, tokenizer_files, corpus_docs):
    tok = tok_lib.load_tokenizer(tok_spec.TokenizerSpec(**tokenizer_files[kind]))
    texts = corpus_docs[:20] + ["", "café 東京"]
    flat, lengths = tok.tokenize_batch(texts)
    singles = [np.asarray(tok.tokenize(t)) for t in texts]
    assert lengths.tolist() == [len(s) for s in singles]
    np.testing.assert_array_equal(flat, np.concatenate(singles))
    assert flat.min() >= 0 and flat.max() < tok.vocab_size
    assert lengths[0] > 0 and lengths[-2] == 0
    assert tok.eod is not None and 0 <= tok.eod < tok.vocab_size


def test_special_ids(tokenizer_files):
    load = lambda k: tok_lib.load_tokenizer(tok_spec.TokenizerSpec(**tokenizer_files[k]))
    byte = load("byte")
    assert (byte.vocab_size, byte.eod, byte.pad, byte.bos, byte.eos) == (267, 256, 257, 258, 259)
    assert (byte.mask, byte.cls, byte.sep) == (260, 261, 262)
    assert byte.detokenize(byte.tokenize("naïve 東京")) == "naïve 東京"
    bpe = load("hf_bpe")
    assert bpe.eod == bpe.eos == 0 and bpe.pad == 1 and bpe.vocab_size == 400
    wp = load("hf_wordpiece")
    assert (wp.pad, wp.cls, wp.sep, wp.mask) == (0, 2, 3, 4)
    assert wp.eos is None and wp.eod == wp.sep  # BERT-style: EOD is [SEP], as in Megatron
    sp = load("sentencepiece")
    assert (sp.pad, sp.bos, sp.eos, sp.eod) == (3, 1, 2, 2)
    tk = load("tiktoken")
    assert tk.vocab_size == 264 and tk.eod == 263
    assert tk.tokenize(" the").tolist() == [260]
    assert (
        load("gpt2").tokenize("the data").tolist() == load("hf_bpe").tokenize("the data").tolist()
    )


def test_type_aliases():
    assert tok_spec.canonical_type("hf") == "HuggingFaceTokenizer"
    assert tok_spec.canonical_type("BYTE") == "ByteTokenizer"
    with pytest.raises(tok_spec.TokenizerError, match="not supported"):
        tok_spec.canonical_type("BertWordPieceCase")


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(tok_spec.TokenizerError, match="needs --tokenizer_model"):
        tok_spec.TokenizerSpec("hf")
    with pytest.raises(tok_spec.TokenizerError, match="does not exist"):
        tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=str(tmp_path / "nope.json")))
    bad = tmp_path / "bad.json"
    bad.write_text("{not a tokenizer")
    with pytest.raises(tok_spec.TokenizerError, match="cannot load Hugging Face tokenizer"):
        tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=str(bad)))
    with pytest.raises(tok_spec.TokenizerError, match="directory without tokenizer.model"):
        tok_lib.load_tokenizer(tok_spec.TokenizerSpec("sentencepiece", model=str(tmp_path)))
    ranks = tmp_path / "bad.tiktoken"
    ranks.write_text("QQ== 0\nnot-base64!! x\n")
    with pytest.raises(tok_spec.TokenizerError, match=r"bad.tiktoken:2"):
        tok_lib.load_tokenizer(tok_spec.TokenizerSpec("tiktoken", model=str(ranks)))


def test_hf_model_directory_config_names_the_special_tokens(tmp_path, tokenizer_files):
    import shutil

    shutil.copy(tokenizer_files["hf_bpe"]["model"], tmp_path / "tokenizer.json")
    plain = tok_lib.load_tokenizer(tok_spec.TokenizerSpec("hf", model=str(tmp_path)))
    assert plain.eod == plain.eos == 0  # <|endoftext|> found by name
    # As in a Hugging Face model directory whose config makes <pad> the end of sequence
    (tmp_path / "tokenizer_config.json").write_text(
        '{"eos_token": "<|endoftext|>", "bos_token": null}'
    )
    (tmp_path / "special_tokens_map.json").write_text('{"eos_token": {"content": "<pad>"}}')
    spec = tok_spec.TokenizerSpec("hf", model=str(tmp_path))
    configured = tok_lib.load_tokenizer(spec)
    assert configured.eos == configured.eod == 1
    names = [f["path"] for f in spec.identity()["files"]]
    assert str(tmp_path / "special_tokens_map.json") in names
    (tmp_path / "tokenizer_config.json").write_text("{broken")
    with pytest.raises(tok_spec.TokenizerError, match="tokenizer_config.json: not valid JSON"):
        tok_lib.load_tokenizer(spec)

"""`token_to_id(name)` of every tokenizer adapter: the id of one vocabulary entry by name (what
fill-in-the-middle looks its sentinel tokens up with), None for a name the vocabulary lacks."""

from __future__ import annotations

import pytest

from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as toks


def _load(tokenizer_files, name):
    return toks.load_tokenizer(tok_spec.TokenizerSpec(**tokenizer_files[name]))


@pytest.mark.parametrize("name", ["hf_bpe", "gpt2"])
def test_byte_level_bpe(tokenizer_files, name):
    tok = _load(tokenizer_files, name)
    assert tok.token_to_id("<|endoftext|>") == tok.eod
    assert tok.token_to_id("<pad>") == tok.pad
    assert tok.token_to_id("<fim_prefix>") is None
    single = tok.tokenize("the")
    if single.size == 1:  # a merged entry is found by its vocabulary spelling
        assert tok.token_to_id("the") == int(single[0])


def test_wordpiece(tokenizer_files):
    tok = _load(tokenizer_files, "hf_wordpiece")
    assert tok.token_to_id("[MASK]") == tok.mask and tok.token_to_id("[CLS]") == tok.cls
    assert tok.token_to_id("<nope>") is None


def test_sentencepiece(tokenizer_files):
    tok = _load(tokenizer_files, "sentencepiece")
    assert tok.token_to_id("</s>") == tok.eos == 2
    assert tok.token_to_id("<unk>") == 0  # the unknown piece itself is a token
    assert tok.token_to_id("<fim_prefix>") is None


def test_tiktoken(tokenizer_files):
    tok = _load(tokenizer_files, "tiktoken")
    assert tok.token_to_id("<|endoftext|>") == tok.eod
    assert tok.token_to_id("the") == 258  # rank of b"the"
    assert tok.token_to_id("<fim_prefix>") is None


def test_byte_and_null():
    byte = toks.ByteTokenizer()
    assert byte.token_to_id("a") is None
    assert byte.token_to_id("<|endoftext|>") == byte.eod == 256
    sentinels = [byte.token_to_id(f"<fim_{n}>") for n in ("prefix", "middle", "suffix", "pad")]
    assert sentinels == [263, 264, 265, 266] and byte.vocab_size == 267
    assert byte.detokenize([104, 263, 105, 266]) == "hi"  # sentinels are not text
    assert byte.tokenize("<fim_pad>").tolist() == list(b"<fim_pad>")  # text is only bytes
    null = toks.NullTokenizer(10)
    assert null.token_to_id("7") == 7 and null.token_to_id("10") == 10  # 10 is its EOD
    assert null.token_to_id("11") is None and null.token_to_id("x") is None


def test_megatron_tiktoken(tmp_path):
    import base64
    import json

    pytest.importorskip("tiktoken")
    vocab = [{"rank": i, "token_bytes": base64.b64encode(bytes([i])).decode(), "token_str": ""}
             for i in range(256)]
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(vocab))
    tok = toks.MegatronTikTokenizer(str(path), num_special_tokens=10, vocab_size=266)
    assert tok.token_to_id("</s>") == tok.eod == 2 and tok.token_to_id("<SPECIAL_9>") == 9
    assert tok.token_to_id("a") == 10 + ord("a")
    assert tok.token_to_id("<fim_prefix>") is None

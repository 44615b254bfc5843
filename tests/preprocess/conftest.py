"""Fixtures for preprocessing tests: a deterministic tiny corpus and tokenizers trained in the test.

Nothing downloads: the Hugging Face BPE/WordPiece and SentencePiece models are trained from the corpus
below, the tiktoken ranks file is written by hand.
"""

from __future__ import annotations

import base64
import json
import os
import random

import numpy as np
import pytest

from jaxblend import storage
from jaxblend.preprocess import sentences
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess.config import PreprocessConfig

_WORDS = [
    "the",
    "data",
    "pipeline",
    "reads",
    "text",
    "and",
    "writes",
    "tokens",
    "to",
    "disk",
    "while",
    "every",
    "worker",
    "keeps",
    "its",
    "own",
    "tokenizer",
    "model",
    "loaded",
    "once",
    "partitions",
    "merge",
    "in",
    "order",
    "so",
    "output",
    "stays",
    "identical",
    "Alpha",
    "Beta",
    "Gamma",
    "Delta",
    "café",
    "naïve",
    "東京",
    "ümlaut",
    "numbers",
    "42",
    "3.14",
    "e.g.",
    "Mr.",
    "Smith",
]


def small_run_config(output_prefix: str, inputs, **kw) -> PreprocessConfig:
    """A run over a small test corpus: EOD appended, 3 partitions, 1 worker, no progress bar
    (each overridable by keyword)."""
    kw.setdefault("append_eod", True)
    kw.setdefault("partitions", 3)
    kw.setdefault("workers", 1)
    kw.setdefault("progress", False)
    return PreprocessConfig(input=tuple(str(i) for i in inputs), output_prefix=output_prefix, **kw)


def make_documents(n: int, seed: int = 0, max_sentences: int = 4) -> list[str]:
    """Returns ``n`` deterministic documents of 1..max_sentences sentences each."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sents = []
        for _ in range(rng.randint(1, max_sentences)):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 12))]
            sents.append(" ".join(words).capitalize() + rng.choice([".", "!", "?"]))
        docs.append(" ".join(sents))
    return docs


def write_jsonl(path: str, docs: list[str], key: str = "text") -> str:
    """Writes one JSON object per document."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({key: d, "id": len(d)}) + "\n" for d in docs)
    return path


def reference_dataset(
    prefix: str,
    docs: list[str],
    tokenizer: tok_spec.Tokenizer,
    append_eod: bool = True,
    split: bool = False,
) -> str:
    """Builds the expected dataset in-process: tokenize each document, write with the builder."""
    dtype = storage.token_dtype_for_vocab(tokenizer.vocab_size)
    with storage.IndexedDatasetBuilder(prefix, dtype=dtype) as b:
        for doc in docs:
            if not doc.strip():
                continue
            parts = sentences.split_sentences(doc) if split else [doc]
            seqs = [np.asarray(tokenizer.tokenize(p), dtype=np.int64) for p in parts]
            seqs = [s for s in seqs if s.size]
            if not seqs:
                continue
            if append_eod:
                seqs[-1] = np.concatenate([seqs[-1], [tokenizer.eod]])
            b.add_document(np.concatenate(seqs), [len(s) for s in seqs])
    return prefix


def read_bytes(prefix: str) -> tuple[bytes, bytes]:
    """Returns the (.bin, .idx) bytes of a dataset."""
    with open(prefix + ".bin", "rb") as f, open(prefix + ".idx", "rb") as g:
        return f.read(), g.read()


@pytest.fixture(scope="session")
def corpus_docs() -> list[str]:
    return make_documents(300)


@pytest.fixture(scope="session")
def tokenizer_files(
    tmp_path_factory: pytest.TempPathFactory, corpus_docs: list[str]
) -> dict[str, dict]:
    """Trains/writes every tokenizer kind once; returns TokenizerSpec kwargs by name."""
    tokenizers = pytest.importorskip("tokenizers")
    spm = pytest.importorskip("sentencepiece")
    pytest.importorskip("tiktoken")
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("tokenizers")
    out: dict[str, dict] = {"byte": {"type": "byte"}}

    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        corpus_docs,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<|endoftext|>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    bpe.save(str(d / "bpe.json"))
    out["hf_bpe"] = {"type": "hf", "model": str(d / "bpe.json")}
    os.makedirs(d / "gpt2", exist_ok=True)
    vocab, merges = bpe.model.save(str(d / "gpt2"))
    out["gpt2"] = {"type": "GPT2BPETokenizer", "vocab_file": vocab, "merge_file": merges}

    wp = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.train_from_iterator(
        corpus_docs,
        trainers.WordPieceTrainer(
            vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        ),
    )
    wp.save(str(d / "wordpiece.json"))
    out["hf_wordpiece"] = {"type": "HuggingFaceTokenizer", "model": str(d / "wordpiece.json")}

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_docs),
        model_prefix=str(d / "spm"),
        vocab_size=100,
        model_type="unigram",
        hard_vocab_limit=False,
        pad_id=3,
        bos_id=1,
        eos_id=2,
        unk_id=0,
        num_threads=1,
        minloglevel=2,
    )
    out["sentencepiece"] = {"type": "sentencepiece", "model": str(d / "spm.model")}

    ranks = [bytes([i]) for i in range(256)] + [b"th", b"he", b"the", b" t", b" the", b"in", b"ing"]
    with open(d / "tiny.tiktoken", "w") as f:
        f.writelines(f"{base64.b64encode(tok).decode()} {rank}\n" for rank, tok in enumerate(ranks))
    out["tiktoken"] = {"type": "tiktoken", "model": str(d / "tiny.tiktoken")}
    return out

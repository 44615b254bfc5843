"""Shared test data for the masked-LM tests: a fake WordPiece vocabulary and sentence-split docs."""

from __future__ import annotations

import numpy as np

from jaxblend import IndexedDatasetBuilder
from jaxblend.sources import MaskedTokenizerInfo

VOCAB_SIZE = 2000
PAD, CLS, SEP, MASK, BOS, EOS = 0, 1, 2, 3, 4, 5
FIRST_TEXT = 10
SENTINELS = tuple(range(1900, 2000))


def vocab() -> list[str]:
    """Token strings: specials, then words and "##" pieces (every id divisible by 3 is a piece)."""
    names = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "<s>", "</s>"] + [
        f"[unused{i}]" for i in range(4)
    ]
    for i in range(FIRST_TEXT, SENTINELS[0]):
        names.append(f"##p{i}" if i % 3 == 0 else f"w{i}")
    names += [f"<extra_id_{j}>" for j in range(len(SENTINELS))]
    return names


def tokenizer_info() -> MaskedTokenizerInfo:
    return MaskedTokenizerInfo.from_vocab(
        vocab(), cls=CLS, sep=SEP, mask=MASK, pad=PAD, bos=BOS, eos=EOS, sentinel_ids=SENTINELS
    )


def sentence(rng: np.random.Generator, words: int) -> np.ndarray:
    """A sentence of `words` words, each a start piece followed by 0..3 "##" pieces."""
    out = []
    for _ in range(words):
        out.append(3 * int(rng.integers(4, 633)) + 1)  # not divisible by 3: a word start
        for _ in range(min(int(rng.geometric(0.6)) - 1, 3)):
            out.append(3 * int(rng.integers(4, 633)))  # divisible by 3: a continuation piece
    return np.array(out, dtype=np.uint16)


def write_documents(
    prefix: str, num_docs: int, seed: int = 0, max_sentences: int = 8
) -> list[list[np.ndarray]]:
    """Writes `num_docs` documents of 1..max_sentences sentences; returns them."""
    rng = np.random.default_rng(seed)
    docs = []
    with IndexedDatasetBuilder(prefix, np.uint16) as builder:
        for _ in range(num_docs):
            sents = [
                sentence(rng, int(rng.integers(3, 16)))
                for _ in range(int(rng.integers(1, max_sentences + 1)))
            ]
            builder.add_document(np.concatenate(sents), [s.size for s in sents])
            docs.append(sents)
    return docs

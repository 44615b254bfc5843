"""Fixtures shared by the storage tests: tiny random datasets written with our builder."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from jaxblend.storage import IndexedDatasetBuilder, open_kvstore
from jaxblend.storage.sequence_spans import SequenceSpans

ALL_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float64, np.float32, np.uint16]

_memory_ids = itertools.count()


@dataclasses.dataclass
class Corpus:
    """What was written: documents as lists of sequences (+ modes)."""

    prefix: str
    dtype: np.dtype
    docs: list[list[np.ndarray]]
    modes: list[list[int]] | None

    @property
    def sequences(self) -> list[np.ndarray]:
        return [s for d in self.docs for s in d]

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(s) for s in self.sequences], dtype=np.int32)

    @property
    def document_indices(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum([len(d) for d in self.docs])]).astype(np.int64)

    @property
    def flat(self) -> np.ndarray:
        seqs = self.sequences
        return np.concatenate(seqs) if seqs else np.zeros(0, self.dtype)


def random_docs(
    rng: np.random.Generator,
    dtype: np.typing.DTypeLike,
    n_docs: int,
    max_seqs: int = 3,
    max_len: int = 40,
    allow_empty: bool = True,
) -> list[list[np.ndarray]]:
    """Random documents of 0..max_seqs sequences of 0..max_len tokens (values fit every dtype)."""
    dt = np.dtype(dtype)
    lo = 1 if not allow_empty else 0
    docs = []
    for _ in range(n_docs):
        n_seq = int(rng.integers(max(lo, 1) if not allow_empty else 0, max_seqs + 1))
        seqs = []
        for _ in range(n_seq):
            n = int(rng.integers(lo, max_len + 1))
            if dt.kind == "f":
                seqs.append(rng.standard_normal(n).astype(dt))
            else:
                seqs.append(rng.integers(0, 100, n).astype(dt))
        docs.append(seqs)
    return docs


def write_corpus(
    prefix: str | Path,
    dtype: np.typing.DTypeLike,
    docs: list[list[np.ndarray]],
    modes: list[list[int]] | None = None,
    use_add_document: bool = False,
) -> Corpus:
    """Writes `docs` with our builder (add_sequence/end_document or add_document)."""
    dt = np.dtype(dtype)
    with IndexedDatasetBuilder(prefix, dt, multimodal=modes is not None) as b:
        for k, doc in enumerate(docs):
            doc_modes = modes[k] if modes is not None else None
            if use_add_document:
                tokens = np.concatenate(doc) if doc else np.zeros(0, dt)
                b.add_document(tokens, [len(s) for s in doc], doc_modes)
            else:
                for j, s in enumerate(doc):
                    b.add_sequence(s, mode=doc_modes[j] if doc_modes is not None else 0)
                b.end_document()
    return Corpus(str(prefix), dt, docs, modes)


def read_spans(dataset, sequence, offset, length) -> np.ndarray:
    """Tokens `[offset[j], offset[j] + length[j])` of sequence `sequence[j]` of `dataset`, for every
    j, concatenated: one `SequenceSpans.read`, over the package's one token reader."""
    sequence, offset, length = (np.asarray(a, np.int64).reshape(-1) for a in (sequence, offset, length))
    out = np.empty(int(length.sum()), dataset.dtype)
    SequenceSpans([dataset]).read(
        np.zeros(sequence.size, np.int64), sequence, offset, length, out, np.cumsum(length) - length
    )
    return out


def copy_to_memory(prefix: str) -> str:
    """Copies a local dataset into a fresh memory:// location; returns its prefix URL."""
    directory = f"memory://storage_tests_{next(_memory_ids)}/"
    kv = open_kvstore(directory)
    for suffix in (".bin", ".idx"):
        with open(prefix + suffix, "rb") as f:
            kv.write("corpus" + suffix, f.read()).result()
    return directory + "corpus"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture
def corpus(tmp_path: Path, rng: np.random.Generator) -> Corpus:
    """A uint16 corpus with multi-sequence, empty and zero-length-sequence documents."""
    docs = random_docs(rng, np.uint16, 40)
    docs[3] = []  # a document without sequences
    docs[5] = [np.zeros(0, np.uint16), np.arange(7, dtype=np.uint16)]
    return write_corpus(str(tmp_path / "corpus"), np.uint16, docs)

"""Small generated GPT datasets for tests (one sequence per document)."""

from __future__ import annotations

import hashlib

import numpy as np

from jaxblend import IndexedDatasetBuilder, index


def dataset_info(name: str, lengths) -> index.DatasetInfo:
    """Facts of a dataset of one-sequence documents of `lengths` tokens (fingerprint: their hash)."""
    lengths = np.asarray(lengths, dtype=np.int32)
    digest = hashlib.sha256(lengths.tobytes()).hexdigest()
    return index.DatasetInfo(name, lengths, np.arange(len(lengths) + 1, dtype=np.int64), digest)


def random_infos(seed: int, shapes: dict[str, tuple[int, int]]) -> dict[str, index.DatasetInfo]:
    """`dataset_info`s of random lengths: name -> (longest document + 1, documents)."""
    rng = np.random.default_rng(seed)
    return {name: dataset_info(name, rng.integers(1, high, n)) for name, (high, n) in shapes.items()}


def write_random_dataset(
    prefix: str,
    rng: np.random.Generator,
    num_documents: int,
    *,
    lengths: tuple[int, int] = (3, 90),
    vocab: tuple[int, int] = (0, 1000),
    eod: int | None = None,
    dtype=np.uint16,
) -> str:
    """Writes `num_documents` documents of random tokens; returns `prefix`.

    Args:
      prefix: output prefix (`.bin`/`.idx`).
      rng: the generator (the data is a pure function of its state).
      num_documents: documents, one sequence each.
      lengths: `[low, high)` of the random token count before the EOD.
      vocab: `[low, high)` of the random token ids.
      eod: appended to every document when given.
      dtype: token dtype.
    """
    with IndexedDatasetBuilder(prefix, dtype) as builder:
        for _ in range(num_documents):
            tokens = rng.integers(*vocab, int(rng.integers(*lengths))).astype(dtype)
            if eod is not None:
                tokens = np.append(tokens, dtype(eod)).astype(dtype)
            builder.add_sequence(tokens)
            builder.end_document()
    return prefix


def three_dataset_infos() -> dict[str, index.DatasetInfo]:
    """Three datasets of random lengths (/d/a, /d/b, /d/c) for index-map tests."""
    return random_infos(5, {"/d/a": (50, 400), "/d/b": (80, 150), "/d/c": (10, 60)})


def three_dataset_config(**kwargs) -> index.GPTDataConfig:
    """A 30/60/10 blend of `three_dataset_infos` over an 80/15/5 split; `kwargs` override."""
    base = {
        "blend": ["30", "/d/a", "60", "/d/b", "10", "/d/c"],
        "split": "80,15,5",
        "seq_length": 16,
        "num_samples": (300, 40, 10),
    }
    base.update(kwargs)
    return index.GPTDataConfig(**base)

"""The BERT/T5 sample index of one split: configuration, fingerprint, cache.

`build_masked_index(config, info, split)` splits a dataset's *documents* with the split string
(docs/format.md, 'Splits'), packs their sentences into samples
(`masked_sample_index.build_masked_sample_index`) and, when `config.cache_dir` is set, stores the
rows in the index cache (`jaxblend.index.cache`) exactly as the GPT maps are: the entry key is the
SHA-256 of the fields that change the rows, the cache format, the index code digest and the
dataset's *content* fingerprint (never its path); writes are atomic; every load is verified and a
corrupt entry is moved aside and rebuilt (docs/format.md, 'Cache' and 'BERT/T5 sample index').
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
from absl import logging

from jaxblend.index import bucket_cache, cache
from jaxblend.index import split as split_lib
from jaxblend.index.config import DatasetInfo
from jaxblend.index.masked_sample_index import build_masked_sample_index
from jaxblend.validation import require_int

MASKED_FORMAT = "masked-index-1"
ROWS = "sample_index"


@dataclasses.dataclass(frozen=True)
class MaskedIndexConfig:
    """Everything that fixes a masked-LM sample index (validated on construction).

    Attributes:
      split: split string over *documents*, e.g. "969,30,1".
      seed: seed of the target lengths and of the row permutation.
      max_length: target tokens per sample before special tokens (>= 2).
      short_sequence_probability: probability of a target uniform in `[2, max_length]`, in [0, 1].
      min_sentences: documents with fewer sentences are skipped; a sample holds at least this
        many (2 for BERT's sentence-order prediction, else 1).
      num_samples: None = one pass over the split's documents; else whole passes until at least
        this many samples exist.
      cache_dir: local directory of the index cache, or None to build in memory only.
    """

    split: str
    seed: int
    max_length: int
    short_sequence_probability: float
    min_sentences: int = 1
    num_samples: int | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        split_lib.parse_split(self.split)
        require_int("MaskedIndexConfig.seed", self.seed, 0)
        require_int("MaskedIndexConfig.max_length", self.max_length, 2)
        require_int("MaskedIndexConfig.min_sentences", self.min_sentences, 1)
        if self.num_samples is not None:
            require_int("MaskedIndexConfig.num_samples", self.num_samples, 1)
        p = self.short_sequence_probability
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(
                f"MaskedIndexConfig.short_sequence_probability must be in [0, 1], got {p!r}"
            )
        if bucket_cache.is_url(self.cache_dir):
            raise ValueError(
                f"MaskedIndexConfig.cache_dir={self.cache_dir!r}: masked sample indices are cached "
                "in a local directory only; give a local path (or None)"
            )

    def payload(self) -> dict[str, Any]:
        """The fields that change the rows, JSON-ready (part of the cache key)."""
        return {
            "split": self.split,
            "seed": int(self.seed),
            "max_length": int(self.max_length),
            "short_sequence_probability": repr(float(self.short_sequence_probability)),
            "min_sentences": int(self.min_sentences),
            "num_samples": None if self.num_samples is None else int(self.num_samples),
        }


@dataclasses.dataclass(frozen=True)
class MaskedSampleIndex:
    """One split's masked-LM sample index.

    Attributes:
      rows: int64 `[n, 3]` rows `(first sentence, end sentence (exclusive), target length)`, in
        sample order (read-only; memory-mapped when loaded from the cache).
      fingerprint: identity of configuration + dataset content + index code (the cache key).
      split: "train", "valid" or "test".
      cache_path: the cache entry directory, or None.
    """

    rows: np.ndarray
    fingerprint: str
    split: str
    cache_path: str | None = None

    def __post_init__(self) -> None:
        self.rows.setflags(write=False)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __reduce__(self):
        """Pickles a cached index as its entry (reloaded memory-mapped, e.g. in Grain workers)."""
        if self.cache_path is None:
            return (MaskedSampleIndex, (np.asarray(self.rows), self.fingerprint, self.split))
        return (_reopen, (self.cache_path, self.fingerprint, self.split))


def _reopen(cache_path: str, key: str, split: str) -> MaskedSampleIndex:
    """The cached index of a pickled `MaskedSampleIndex`, checked like any cache load."""
    rows = _load_rows(os.path.dirname(cache_path), key, "summary")
    if rows is None:
        raise ValueError(
            f"masked sample index entry {cache_path} vanished or is corrupt in this process; "
            "rebuild it by constructing the source again"
        )
    return MaskedSampleIndex(rows, key, split, cache_path)


def masked_index_key(config: MaskedIndexConfig, info: DatasetInfo, split: str) -> str:
    """The cache key (and identity) of a split's masked sample index."""
    return cache.fingerprint(
        {
            "format": MASKED_FORMAT,
            "index_cache_format": cache.FORMAT_VERSION,
            "index_code": cache.code_digest(),
            "config": config.payload(),
            "split_name": split,
            "dataset": info.fingerprint,
        }
    )


def _split_bounds(config: MaskedIndexConfig, info: DatasetInfo, split: str) -> np.ndarray:
    """int64 sentence boundaries of the split's consecutive documents."""
    bookend = split_lib.split_matrix(split_lib.parse_split(config.split))[
        split_lib.SPLIT_NAMES.index(split)
    ]
    if bookend is None:
        raise ValueError(f"split {split!r} is empty under split string {config.split!r}")
    documents = np.asarray(info.document_indices, dtype=np.int64)
    num_documents = documents.shape[0] - 1
    docs = split_lib.split_indices(bookend, num_documents)
    if docs.size == 0:
        raise ValueError(
            f"split {split!r} of {info.name} has no documents ({num_documents} "
            f"documents, split {config.split!r})"
        )
    return documents[docs[0] : docs[-1] + 2]


def _build_rows(config: MaskedIndexConfig, info: DatasetInfo, split: str) -> np.ndarray:
    rows = build_masked_sample_index(
        _split_bounds(config, info, split),
        info.sequence_lengths,
        config.max_length,
        config.short_sequence_probability,
        config.min_sentences,
        config.seed,
        config.num_samples,
    )
    if rows.shape[0] == 0:
        raise ValueError(
            f"split {split!r} of {info.name} yields no samples: no document has "
            f"{config.min_sentences} or more sentences"
        )
    return rows


def _load_rows(cache_dir: str, key: str, verify: str) -> np.ndarray | None:
    """The cached rows of entry `key`, or None (absent, corrupt or not rows: moved aside)."""
    loaded = cache.load(cache_dir, key, verify)
    if loaded is None:
        return None
    rows = loaded[0].get(ROWS)
    meta = loaded[1]
    usable = (
        rows is not None
        and meta.get("format") == MASKED_FORMAT
        and rows.dtype == np.int64
        and rows.ndim == 2
        and rows.shape[1] == 3
        and rows.shape[0] > 0
    )
    if not usable:
        logging.warning(
            "masked index cache entry %s is not a sample index; rebuilding it",
            cache.entry_path(cache_dir, key),
        )
        cache.discard(cache_dir, key)
        return None
    return rows


def build_masked_index(
    config: MaskedIndexConfig, info: DatasetInfo, split: str, *, verify: str = "summary"
) -> MaskedSampleIndex:
    """Builds (or loads from `config.cache_dir`) the masked sample index of one split.

    Args:
      config: the index configuration.
      info: the dataset's sequence lengths, document boundaries and content fingerprint.
      split: "train", "valid" or "test".
      verify: how a cached entry is checked: "summary" (every start) or "full" (every byte).

    Returns:
      The `MaskedSampleIndex`.

    Raises:
      ValueError: an unknown or empty split, a split without documents, or one without samples.
    """
    if split not in split_lib.SPLIT_NAMES:
        raise ValueError(f"split must be one of {split_lib.SPLIT_NAMES}, got {split!r}")
    key = masked_index_key(config, info, split)
    if config.cache_dir:
        rows = _load_rows(config.cache_dir, key, verify)
        if rows is not None:
            return MaskedSampleIndex(rows, key, split, cache.entry_path(config.cache_dir, key))
    rows = _build_rows(config, info, split)
    if not config.cache_dir:
        return MaskedSampleIndex(rows, key, split)
    meta = {"format": MASKED_FORMAT, "split": split}
    path = cache.save(config.cache_dir, key, {ROWS: rows}, meta)
    logging.info("built masked sample index %s (%d samples of %s)", key, len(rows), info.name)
    reloaded = _load_rows(config.cache_dir, key, verify)  # memory-mapped, as later starts see it
    return MaskedSampleIndex(rows if reloaded is None else reloaded, key, split, path)

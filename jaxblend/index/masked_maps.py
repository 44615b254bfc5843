"""The BERT/T5 sample index of one split: configuration, key, rows. Pure: no I/O.

`build_masked_index(config, info, split)` splits a dataset's *documents* with the split string
(docs/format.md, 'Splits') and packs their sentences into samples
(`masked_sample_index.build_masked_sample_index`), in memory. The map store caches the rows exactly
as it caches the GPT maps (`jaxblend.map_store.load_or_build_masked_index`: a local directory or a
bucket): the entry key (`masked_index_key`) is the fingerprint of the fields that change the rows,
the maps layout, the index code digest and the dataset's *content* fingerprint (never its path);
`masked_index_from_arrays` checks a loaded entry (docs/format.md, 'Cache' and 'BERT/T5 sample
index').
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxblend import identity
from jaxblend.index import maps_key
from jaxblend.index import split as split_lib
from jaxblend.index.config import DatasetInfo
from jaxblend.index.masked_sample_index import build_masked_sample_index
from jaxblend.validation import require_choice, require_int, require_probability

MASKED_FORMAT = "masked-index"
MASKED_FORMAT_VERSION = 2
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
    """

    split: str
    seed: int
    max_length: int
    short_sequence_probability: float
    min_sentences: int = 1
    num_samples: int | None = None

    def __post_init__(self) -> None:
        split_lib.parse_split(self.split)
        require_int("MaskedIndexConfig.seed", self.seed, 0)
        require_int("MaskedIndexConfig.max_length", self.max_length, 2)
        require_int("MaskedIndexConfig.min_sentences", self.min_sentences, 1)
        if self.num_samples is not None:
            require_int("MaskedIndexConfig.num_samples", self.num_samples, 1)
        require_probability(
            "MaskedIndexConfig.short_sequence_probability", self.short_sequence_probability
        )


@dataclasses.dataclass(frozen=True)
class MaskedSampleIndex:
    """One split's masked-LM sample index.

    Attributes:
      rows: int64 `[n, 3]` rows `(first sentence, end sentence (exclusive), target length)`, in
        sample order (read-only; memory-mapped when loaded from the cache).
      fingerprint: identity of configuration + dataset content + index code (the cache key).
      split: "train", "valid" or "test".
      cache_path: the map-store entry directory the rows are memory-mapped from, or None.
      reopen: a picklable zero-argument callable returning the rows again (the map store's
        recipe for a cached entry), so a pickled index reloads them memory-mapped (e.g. in Grain
        workers) instead of carrying a copy; None pickles the rows.
    """

    rows: np.ndarray
    fingerprint: str
    split: str
    cache_path: str | None = None
    reopen: Callable[[], np.ndarray] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.rows.setflags(write=False)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __reduce__(self):
        """Pickles a cached index as its `reopen` recipe, else as its rows."""
        if self.reopen is None:
            return (MaskedSampleIndex, (np.asarray(self.rows), self.fingerprint, self.split))
        return (_reopened, (self.reopen, self.fingerprint, self.split, self.cache_path))


def _reopened(
    reopen: Callable[[], np.ndarray], key: str, split: str, cache_path: str | None
) -> MaskedSampleIndex:
    """The index of a pickled `MaskedSampleIndex`, its rows from `reopen`."""
    return MaskedSampleIndex(reopen(), key, split, cache_path, reopen)


def masked_index_key(config: MaskedIndexConfig, info: DatasetInfo, split: str) -> str:
    """The cache key (and identity) of a split's masked sample index."""
    fields = dataclasses.asdict(config)  # every field changes the rows
    fields["short_sequence_probability"] = float(config.short_sequence_probability)  # 0 as 0.0
    return identity.fingerprint(
        MASKED_FORMAT,
        MASKED_FORMAT_VERSION,
        maps_layout=maps_key.MAPS_LAYOUT,
        index_code=maps_key.code_digest(),
        config=fields,
        split_name=split,
        dataset=info.fingerprint,
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


def masked_index_from_arrays(
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    key: str,
    split: str,
    cache_path: str | None = None,
    reopen: Callable[[], np.ndarray] | None = None,
) -> MaskedSampleIndex:
    """The index over arrays and metadata written by `masked_index_arrays` (built, or loaded from
    a map store entry at `cache_path`).

    Raises:
      ValueError: they are not a masked sample index (the map store rebuilds such an entry).
    """
    rows = arrays.get(ROWS)
    usable = (
        rows is not None
        and meta.get("format") == MASKED_FORMAT
        and rows.dtype == np.int64
        and rows.ndim == 2
        and rows.shape[1] == 3
        and rows.shape[0] > 0
    )
    if not usable:
        raise ValueError(f"masked sample index {key}: the entry is not a sample index")
    return MaskedSampleIndex(rows, key, split, cache_path, reopen)


def masked_index_arrays(
    config: MaskedIndexConfig, info: DatasetInfo, split: str
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and JSON metadata of a split's index (what a map store saves).

    Raises:
      ValueError: as `build_masked_index`.
    """
    require_choice("split", split, split_lib.SPLIT_NAMES)
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
    return {ROWS: rows}, {"format": MASKED_FORMAT, "split": split}


def build_masked_index(config: MaskedIndexConfig, info: DatasetInfo, split: str) -> MaskedSampleIndex:
    """Builds the masked sample index of one split in memory (no cache; for a cached build use
    `jaxblend.map_store.load_or_build_masked_index`).

    Args:
      info: the dataset's sequence lengths, document boundaries and content fingerprint.
      split: "train", "valid" or "test".

    Returns:
      The `MaskedSampleIndex`.

    Raises:
      ValueError: an unknown or empty split, a split without documents, or one without samples.
    """
    arrays, meta = masked_index_arrays(config, info, split)
    return masked_index_from_arrays(arrays, meta, masked_index_key(config, info, split), split)

"""What BERT and T5 sources share: the split's sample index, one batched read, the identity.

Built, as Megatron-Core's masked WordPiece datasets are, from a dataset whose documents are
several sequences (sentences), split by *documents* (`split="969,30,1"`, the split rule of
docs/format.md, 'Splits', applied to the document count). Which sentences make sample i, and its
target length, is row i of the split's sample index, built by the index layer and cached by the
map store of the source's `DataAccess` (`jaxblend.map_store.load_or_build_masked_index`;
docs/format.md, 'BERT/T5 sample index'). The source only reads those sentences and masks them
(`_masking.mask_ngrams`).

Determinism: sample i uses `np.random.default_rng([random_seed, i])` alone (NumPy PCG64 seeded by
the pair), so any sample can be recomputed in isolation on any host, in any order. Statistics
match Megatron-Core's (tests/sources/test_masked_stats.py) but not its bits: Megatron draws from
`RandomState(seed + i)` and a C++ Mersenne Twister.

Deviations from Megatron-Core, on purpose: documents with a sentence longer than 512 tokens are
kept (they are truncated like any other); T5 skips an n-gram that would overflow the decoder length
instead of failing the sample; pad positions hold `pad` (not 0) and labels -1 (not 0 at pad ids);
the permutation pass draws from the sample's generator (Megatron uses the global NumPy RNG there).
"""

from __future__ import annotations

import itertools
import os
from typing import ClassVar

import numpy as np

from jaxblend import identity, opening
from jaxblend.access import DataAccess
from jaxblend.index import split as split_lib
from jaxblend.map_store import load_or_build_masked_index
from jaxblend.sources import base
from jaxblend.sources.masked_config import MaskedConfig, MaskedTokenizerInfo
from jaxblend.storage import IndexedDataset
from jaxblend.storage.sequence_spans import SequenceSpans
from jaxblend.validation import require_choice


class MaskedSource(base.BatchSource):
    """Base of `BERTSource` and `T5Source`: split, sample index, one batched read per batch.

    Args:
      dataset: an `IndexedDataset` of sentence-split documents, or the prefix of one (read through
        `SequenceSpans` over the package's one token reader, one call per batch).
      config: the subclass's config type (`config_type`).
      tokenizer: the special token ids.
      split: "train", "valid" or "test".
      access: how data is reached: the dataset (when a prefix is given) and the map store caching
        the sample index (default: `DataAccess.from_env()`, evaluated once here).

    Raises:
      TypeError: if `config` is not a `config_type`.
      ValueError: if the split is empty, has no documents, or no document has enough sentences.
    """

    config_type: ClassVar[type[MaskedConfig]] = MaskedConfig

    def __init__(
        self,
        dataset: IndexedDataset | str | os.PathLike,
        config: MaskedConfig,
        tokenizer: MaskedTokenizerInfo,
        split: str = "train",
        *,
        access: DataAccess | None = None,
    ):
        if not isinstance(config, self.config_type):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_type.__name__}, "
                f"got {type(config).__name__}"
            )
        require_choice("split", split, split_lib.SPLIT_NAMES)
        access = DataAccess.from_env() if access is None else access
        if isinstance(dataset, (str, os.PathLike)):
            dataset = IndexedDataset(dataset, access=access)
        self.dataset = dataset
        self._reader = SequenceSpans([dataset])
        self.config = config
        self.tokenizer = tokenizer
        self.split = split
        self._check_tokenizer()
        self.index = load_or_build_masked_index(
            config.index_config(), opening.dataset_info(dataset, dataset.prefix), split, access
        )
        self._fingerprint = identity.fingerprint(
            "masked_source", 1, source=type(self).__name__, sample_index=self.index.fingerprint,
            config=config.identity_fields(), tokenizer=tokenizer.identity_fields(),
        )

    @property
    def sample_index(self) -> np.ndarray:
        """int64 `[n, 3]` rows `(first sentence, end sentence, target length)` of the samples."""
        return self.index.rows

    def _check_tokenizer(self) -> None:
        """Refuses tokenizer info the subclass cannot use (none needed by default)."""

    def __len__(self) -> int:
        return len(self.index)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset={self.dataset!r}, split={self.split!r}, "
            f"config={self.config!r}, samples={len(self)})"
        )

    @property
    def fingerprint(self) -> str:
        """Identity of the sample index (data content, index config, code), masking and tokens."""
        return self._fingerprint

    def _read_sentences(self, ids: np.ndarray) -> list[list[np.ndarray]]:
        """Sentences (int64 tokens) of each sample, read with one batched storage call."""
        rows = self.sample_index[ids]
        counts = rows[:, 1] - rows[:, 0]
        sentence_ids = (
            np.concatenate([np.arange(b, e, dtype=np.int64) for b, e in rows[:, :2]])
            if ids.size
            else np.zeros(0, np.int64)
        )
        lengths = np.asarray(self.dataset.sequence_lengths[sentence_ids], np.int64)
        ends = np.cumsum(lengths)
        flat = np.empty(int(ends[-1]) if ends.size else 0, np.int64)
        zeros = np.zeros(sentence_ids.size, np.int64)
        self._reader.read(zeros, sentence_ids, zeros, lengths, flat, ends - lengths)
        pieces = np.split(flat, ends[:-1]) if sentence_ids.size else []
        bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
        return [pieces[b:e] for b, e in itertools.pairwise(bounds)]

    def _generator(self, sample_id: int) -> np.random.Generator:
        return np.random.default_rng([int(self.config.random_seed), int(sample_id)])

"""SequenceSource: one IndexedDataset sequence per sample, for variable-length (SFT-style) data.

The source for token-budget bucketed batching (`jaxblend.sampling.token_budget_planning`): sample i is sequence
i of the dataset (e.g. one tokenized instruction/response example or one sentence), its length
`lengths[i]` feeds `plan_token_budget`, and `get_padded_batch(ids, L)` returns the rows padded (or
truncated) to the bucket length L. Each batch is one `SequenceSpans.read` (over the package's one
token reader) straight into the padded rows (sequence ids and token counts; byte offsets stay
inside `jaxblend.storage`).

Batch keys (k rows, L tokens):

| key | dtype, shape | meaning |
|---|---|---|
| `tokens` | int32 [k, L] | the sequence's first min(len, L) tokens, then `pad_id` |
| `padding_mask` | int32 [k, L] | 1 on real tokens, 0 on padding |
| `lengths` | int32 [k] | real tokens in the row (0 for an empty row) |
| `sample_ids` | int64 [k] | sequence id, -1 for an empty (padding) row |
"""

from __future__ import annotations

import os

import numpy as np

from jaxblend import identity
from jaxblend.sources import base
from jaxblend.storage import IndexedDataset
from jaxblend.storage.sequence_spans import SequenceSpans
from jaxblend.validation import require_int


class SequenceSource(base.BatchSource):
    """Each sequence of an IndexedDataset as one variable-length sample.

    Args:
      dataset: an `IndexedDataset` or the prefix of one.
      max_length: `get_batch` pads/truncates to this length (fixed-shape use with `make_loader`).
      pad_id: token id written in padding positions.

    Raises:
      ValueError: if max_length < 1.
    """

    def __init__(
        self, dataset: IndexedDataset | str | os.PathLike, max_length: int, pad_id: int = 0
    ):
        require_int("SequenceSource.max_length", max_length, 1)
        if isinstance(dataset, (str, os.PathLike)):
            dataset = IndexedDataset(dataset)
        self.dataset = dataset
        self._reader = SequenceSpans([dataset])
        self.max_length = int(max_length)
        self.pad_id = int(pad_id)
        self._fingerprint: str | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __repr__(self) -> str:
        return f"SequenceSource(dataset={self.dataset!r}, max_length={self.max_length}, pad_id={self.pad_id})"

    @property
    def lengths(self) -> np.ndarray:
        """int32[n] tokens of each sample (input to `plan_token_budget`)."""
        return np.asarray(self.dataset.sequence_lengths)

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = identity.fingerprint(
                "sequence_source", 1, dataset=self.dataset.fingerprint,
                max_length=self.max_length, pad_id=self.pad_id,
            )
        return self._fingerprint

    def get_batch(self, sample_ids) -> dict[str, np.ndarray]:
        """Samples padded/truncated to `max_length`."""
        return self.get_padded_batch(self._check_ids(sample_ids), self.max_length)

    def get_padded_batch(self, sample_ids, length: int) -> dict[str, np.ndarray]:
        """Samples `sample_ids` (-1 = empty row) padded or truncated to `length` tokens.

        Raises:
          IndexError: if an id is out of range.
        """
        ids = np.asarray(sample_ids, dtype=np.int64).reshape(-1)
        real = ids >= 0
        if real.any():
            self._check_ids(ids[real])
        k = ids.size
        take = np.zeros(k, np.int64)
        seq = ids[real]
        take[real] = np.minimum(np.asarray(self.dataset.sequence_lengths[seq], np.int64), length)
        tokens = np.full((k, length), self.pad_id, np.int32)
        rows = np.flatnonzero(real)
        self._reader.read(
            np.zeros(rows.size, np.int64), seq, np.zeros(rows.size, np.int64), take[real],
            tokens.reshape(-1), rows * np.int64(length),
        )
        mask = np.arange(length)[None, :] < take[:, None]
        return {
            "tokens": tokens,
            "padding_mask": mask.astype(np.int32),
            "lengths": take.astype(np.int32),
            "sample_ids": ids.copy(),
        }

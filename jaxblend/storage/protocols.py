"""What sources need from storage, as `typing.Protocol`s (docs/design.md, 'Layers').

A source learns what a dataset holds from `SequenceDataset` (which `IndexedDataset` satisfies).
Byte pointers of the `.idx` (`sequence_pointers`) and the token dtype's width stay inside
`jaxblend.storage`: sources read `.bin` token ranges through `TokenReader` (the package's one read
path, one call per batch), or spans in *sequence units* (sequence ids, token offsets within a
sequence, token counts) through `sequence_spans.SequenceSpans` over the same `TokenReader`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class SequenceDataset(Protocol):
    """One dataset as a source sees it: a table of token sequences grouped into documents."""

    @property
    def prefix(self) -> str:
        """Where the dataset lives (for messages; never part of an identity)."""

    @property
    def fingerprint(self) -> str:
        """Content identity of the dataset (changes whenever its bytes do)."""

    @property
    def is_remote(self) -> bool:
        """Whether reads go to an object store."""

    @property
    def sequence_lengths(self) -> np.ndarray:
        """int32 `[N]` tokens of each sequence."""

    @property
    def document_indices(self) -> np.ndarray:
        """int64 `[D + 1]` sequence id where each document starts; the last entry is N."""

    def __len__(self) -> int:
        """N, the number of sequences."""

"""What sources need from storage, as `typing.Protocol`s (docs/design.md, 'Layers').

A source learns what a dataset holds from `SequenceDataset` (which `IndexedDataset` satisfies).
Byte pointers of the `.idx` (`sequence_pointers`) and the token dtype's width stay inside
`jaxblend.storage`: sources read `.bin` token ranges through `TokenReader` (the package's one read
path, one call per batch), or spans in *sequence units* (sequence ids, token offsets within a
sequence, token counts) through a `SequenceReader`, which `SequenceSpans` implements over the
same `TokenReader`.
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


class SequenceReader(Protocol):
    """Reads token ranges of sequences of several datasets into one buffer (one call per batch).

    Attributes:
      requests: object-store requests issued so far by this process.
    """

    requests: int

    def read(
        self,
        dataset: np.ndarray,
        sequence: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        out: np.ndarray,
        out_pos: np.ndarray,
    ) -> None:
        """Copies tokens `[offset[j], offset[j] + length[j])` of sequence `sequence[j]` of dataset
        `dataset[j]` to `out[out_pos[j] : out_pos[j] + length[j]]`, for every j (int64 arrays).
        """

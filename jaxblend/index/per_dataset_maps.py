"""The seam through which a map store offers ready-made maps of one dataset during a build.

`build_data_maps` builds every dataset's GPT maps itself unless a `PerDatasetMapsProvider` hands
them over (a map store reading Megatron-Core's own cache does: `jaxblend.map_store.megatron`).
The provider is asked with a `DatasetMapsRequest` (everything the maps must be) and answers with
maps it has checked against that request, or None; the index layer does no I/O of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

from jaxblend.index.gpt import GPTIndexMaps


@dataclasses.dataclass(frozen=True)
class DatasetMapsRequest:
    """What the maps of one dataset split must be.

    Attributes:
      split: ``train``, ``valid`` or ``test``.
      num_samples: samples requested from this dataset (None: one epoch).
      seq_length: S.
      bookend: the split's ``(begin, end)`` fractions.
      documents: the split's sequence ids.
      sequence_lengths: every sequence length of the dataset.
      add_extra_token: samples of S + 1 tokens.
      drop_last_partial_sequence: whether a last partial sample is dropped.
    """

    prefix: str
    split: str
    num_samples: int | None
    seq_length: int
    seed: int
    bookend: tuple[float, float]
    documents: np.ndarray
    sequence_lengths: np.ndarray
    add_extra_token: bool
    drop_last_partial_sequence: bool


class PerDatasetMapsProvider(Protocol):
    """Offers one dataset's GPT maps during a build (see the module docstring)."""

    def gpt_maps(self, request: DatasetMapsRequest) -> GPTIndexMaps | None:
        """The maps `request` describes, checked to be exactly those, or None to build them."""
        ...

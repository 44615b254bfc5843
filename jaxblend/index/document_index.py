"""GPT document index: E epochs of a split's sequence ids, shuffled with Megatron's RNG order.

The shuffle must be `np.random.RandomState.shuffle` on the same array length, consumed in the same
order as Megatron-Core, so its cost is numpy's (no faster bit-exact route exists).
"""

from __future__ import annotations

import numpy as np


def build_document_index(
    documents: np.ndarray,
    num_epochs: int,
    rng: np.random.RandomState,
    separate_final_epoch: bool,
) -> np.ndarray:
    """Builds the int32 document index.

    Args:
      documents: the split's sequence ids (int32).
      num_epochs: E >= 1.
      rng: the dataset/split RandomState (advanced in place).
      separate_final_epoch: shuffle the first E-1 epochs and the last epoch separately.

    Returns:
      int32 array of length E * len(documents).
    """
    documents = np.asarray(documents)
    if not separate_final_epoch or num_epochs == 1:
        index = np.tile(documents.astype(np.int32, copy=False), num_epochs)
        rng.shuffle(index)
        return index
    first = build_document_index(documents, num_epochs - 1, rng, False)
    last = build_document_index(documents, 1, rng, False)
    return np.concatenate((first, last))

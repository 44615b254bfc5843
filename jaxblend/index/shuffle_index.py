"""GPT shuffle index: a permutation of the sample index rows, drawn like Megatron-Core.

uint32 unless the total reaches 2**32 - 2 (then int64). With a separate final epoch, the samples
of the first E-1 epochs and those of the last epoch are shuffled separately and concatenated.
"""

from __future__ import annotations

import numpy as np

_UINT32_LIMIT = int(np.iinfo(np.uint32).max) - 1


def shuffle_index_dtype(total_size: int) -> np.dtype:
    """Megatron's shuffle index dtype for `total_size` samples."""
    return np.dtype(np.int64) if total_size >= _UINT32_LIMIT else np.dtype(np.uint32)


def build_shuffle_index(
    num_samples: int, total_size: int, rng: np.random.RandomState
) -> np.ndarray:
    """Builds `shuffle([0, num_samples)) ++ shuffle([num_samples, total_size))`.

    Args:
      num_samples: size of the first shuffled range.
      total_size: size of the whole index (>= num_samples).
      rng: the dataset/split RandomState, after the document index shuffles.

    Returns:
      The shuffle index (uint32 or int64).
    """
    dtype = shuffle_index_dtype(total_size)
    first = np.arange(0, num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    rng.shuffle(last)
    return np.concatenate((first, last))

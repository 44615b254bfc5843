"""Slow, obviously-correct twins of the Numba kernels of `jaxblend.index`, for the tests.

Each function restates Megatron-Core's algorithm in plain Python/numpy, one step at a time.
"""

from __future__ import annotations

import numpy as np


def sample_index(
    sizes: np.ndarray,
    document_index: np.ndarray,
    seq_length: int,
    num_samples: int,
    add_extra_token: bool,
) -> np.ndarray:
    """Walks documents sample by sample; returns int64 `[num_samples + 1, 2]`."""
    extra = 1 if add_extra_token else 0
    rows = [(0, 0)]
    position, offset = 0, 0
    for _ in range(num_samples):
        remaining = seq_length + extra
        while remaining != 0:
            length = int(sizes[document_index[position]]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - extra
                remaining = 0
            elif position == len(document_index) - 1:
                offset = int(sizes[document_index[position]]) - extra
                break
            else:
                position += 1
                offset = 0
        rows.append((position, offset))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def blending_indices(weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Greedy largest error with numpy argmax (first maximum = smallest index)."""
    weights = np.asarray(weights, dtype=np.float64)
    counts = np.zeros(len(weights), dtype=np.int64)
    dataset_index = np.zeros(size, dtype=np.int64)
    dataset_sample_index = np.zeros(size, dtype=np.int64)
    for s in range(size):
        errors = weights * max(float(s), 1.0) - counts.astype(np.float64)
        j = int(np.argmax(errors))
        dataset_index[s] = j
        dataset_sample_index[s] = counts[j]
        counts[j] += 1
    return dataset_index, dataset_sample_index


def exhaustive_blending_indices(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exhaustive greedy: among non-exhausted datasets, first strictly largest error."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    weights = sizes / np.float64(total)
    counts = np.zeros(len(sizes), dtype=np.int64)
    dataset_index = np.zeros(total, dtype=np.int64)
    dataset_sample_index = np.zeros(total, dtype=np.int64)
    for s in range(total):
        errors = weights * max(float(s), 1.0) - counts.astype(np.float64)
        errors[counts >= sizes] = -np.inf
        j = int(np.argmax(errors))
        dataset_index[s] = j
        dataset_sample_index[s] = counts[j]
        counts[j] += 1
    return dataset_index, dataset_sample_index


def pieces(
    sizes: np.ndarray,
    document_index: np.ndarray,
    sample_index: np.ndarray,
    shuffle_index: np.ndarray,
    i: int,
    add_extra_token: bool,
) -> list[tuple[int, int, int]]:
    """Non-empty `(sequence, start, stop)` pieces of GPT sample i, as Megatron reads them."""
    extra = 1 if add_extra_token else 0
    j = int(shuffle_index[i])
    b, ob = (int(v) for v in sample_index[j])
    e, oe = (int(v) for v in sample_index[j + 1])
    out = []
    if b == e:
        out.append((int(document_index[b]), ob, oe + extra))
    else:
        for p in range(b, e + 1):
            seq = int(document_index[p])
            start = ob if p == b else 0
            stop = int(sizes[seq]) if p < e else oe + extra
            out.append((seq, start, stop))
    return [(s, a, min(z, int(sizes[s]))) for s, a, z in out if min(z, int(sizes[s])) > a]

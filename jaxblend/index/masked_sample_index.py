"""The masked-LM (BERT/T5) sample index: sentences packed into samples (pure numpy + Numba).

Megatron-Core's masked WordPiece datasets read documents made of several sequences (sentences).
A sample is a run of consecutive sentences of one document up to a target length; this module
computes those runs (docs/format.md, 'BERT/T5 sample index'), like Megatron-Core's
`helpers.build_mapping` in its rules and statistics but not bit for bit: the target lengths come
from a counter-based hash (`splitmix64`) of `(seed, pass, first sentence)` instead of a sequential
Mersenne Twister, so the index is a pure function of its inputs. The rows are then permuted by
`np.random.default_rng([seed, 1])`.

`jaxblend.index.masked_maps` builds it per split from a `DatasetInfo` and caches it.
"""

from __future__ import annotations

import numba
import numpy as np

from jaxblend.index.splitmix import MASK64, splitmix64


@numba.njit(cache=True, nogil=True)
def _target_length(seed, epoch, start, max_length, short_threshold):  # pragma: no cover
    """The target length of the sample starting at sentence `start` in pass `epoch`."""
    key = splitmix64(
        splitmix64(np.uint64(seed)) ^ (np.uint64(epoch) << np.uint64(40)) ^ np.uint64(start)
    )
    if key < np.uint64(short_threshold):
        return 2 + np.int64(splitmix64(key) % np.uint64(max_length - 1))
    return max_length


@numba.njit(cache=True, nogil=True)
def _pack_kernel(
    doc_bounds, lengths, max_length, short_threshold, min_sentences, seed, num_samples, out
):  # pragma: no cover - compiled
    """Fills `out` (or only counts when it has 0 rows); returns the number of samples."""
    n = 0
    epoch = 0
    fill = out.shape[0] > 0
    while True:
        if num_samples < 0:
            if epoch == 1:
                break
        elif n >= num_samples:
            break
        emitted_this_epoch = 0
        for d in range(doc_bounds.shape[0] - 1):
            first = doc_bounds[d]
            last = doc_bounds[d + 1]
            if last - first < min_sentences:
                continue
            start = first
            total = 0
            count = 0
            target = _target_length(seed, epoch, start, max_length, short_threshold)
            for s in range(first, last):
                total += lengths[s]
                count += 1
                remaining = last - s - 1
                if (total >= target and remaining > 1 and count >= min_sentences) or remaining == 0:
                    if fill:
                        out[n, 0] = start
                        out[n, 1] = s + 1
                        out[n, 2] = target
                    n += 1
                    emitted_this_epoch += 1
                    start = s + 1
                    total = 0
                    count = 0
                    target = _target_length(seed, epoch, start, max_length, short_threshold)
        epoch += 1
        if emitted_this_epoch == 0:
            break
    return n


def build_masked_sample_index(
    doc_bounds: np.ndarray,
    sequence_lengths: np.ndarray,
    max_length: int,
    short_sequence_probability: float,
    min_sentences: int,
    seed: int,
    num_samples: int | None,
) -> np.ndarray:
    """Packs the sentences of each document into samples, then shuffles the samples.

    Args:
      doc_bounds: int64[D+1] sentence boundaries of the split's D consecutive documents.
      sequence_lengths: int32[N] tokens per sentence of the whole dataset.
      max_length: target tokens per sample before special tokens (>= 2).
      short_sequence_probability: probability that a sample targets a length uniform in
        `[2, max_length]` instead.
      min_sentences: documents with fewer sentences are skipped; a sample holds at least this many
        (2 for sentence-order prediction).
      seed: random seed.
      num_samples: None = one pass over the documents; else whole passes (each with fresh target
        lengths) until at least this many samples exist.

    Returns:
      int64[n, 3] rows `(first sentence, end sentence (exclusive), target length)`, shuffled.
    """
    bounds = np.ascontiguousarray(doc_bounds, dtype=np.int64)
    lengths = np.ascontiguousarray(sequence_lengths, dtype=np.int64)
    threshold = min(int(short_sequence_probability * 2.0**64), MASK64)
    wanted = -1 if num_samples is None else int(num_samples)
    args = (
        bounds,
        lengths,
        int(max_length),
        np.uint64(threshold),
        int(min_sentences),
        int(seed) & MASK64,
    )
    n = _pack_kernel(*args, wanted, np.zeros((0, 3), np.int64))
    out = np.zeros((n, 3), np.int64)
    _pack_kernel(*args, wanted, out)
    order = np.random.default_rng([int(seed) & MASK64, 1]).permutation(n)
    return out[order]

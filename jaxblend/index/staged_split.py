"""The maps of one dataset of a staged train split: its E one-epoch GPT maps end to end.

A staged split (`jaxblend.index.blend_schedule`) is stored exactly like a blended split; inside a
dataset's block, epoch e's documents follow epoch e - 1's, its `n + 1` sample rows have their
document positions moved by `e * D`, and its shuffle values are moved to rows `e * (n + 1) + ...`,
so dataset sample `e * n + q` is epoch e's sample q (docs/format.md, "Staged blends"). The read
kernel resolves a staged sample like any blended one, and `<split>.epochs` lets
`SplitMaps.constituent` give back any one epoch.
"""

from __future__ import annotations

import numpy as np

from jaxblend.index import blend_schedule, gpt
from jaxblend.index.config import DatasetInfo, GPTDataConfig

_INT32_MAX = int(np.iinfo(np.int32).max)
_UINT32_LIMIT = int(np.iinfo(np.uint32).max) - 1


def dataset_epochs(
    config: GPTDataConfig,
    prefix: str,
    info: DatasetInfo,
    documents: np.ndarray,
    max_length: int,
    drawn: int,
) -> tuple[gpt.GPTIndexMaps, tuple[str, str], int]:
    """One dataset's epochs end to end, enough for the `drawn` samples the stages take of it.

    Args:
      config: the data configuration (seq_length, seed, extra token).
      prefix: the dataset, for messages.
      info: its sequence lengths.
      documents: the train split's sequence ids.
      max_length: its longest sequence.
      drawn: samples the stages draw from it.

    Returns:
      `(maps, Megatron's (sample, shuffle) dtypes of one epoch, epochs)`; the maps' dtypes are
      widened to int64 where the epochs together overflow Megatron's.

    Raises:
      ValueError: samples drawn from a dataset with no complete sample, or overflowing counts.
    """

    def epoch(e: int) -> gpt.GPTIndexMaps:
        return gpt.build_gpt_index_maps(
            info.sequence_lengths,
            documents,
            None,
            config.seq_length,
            blend_schedule.epoch_seed(config.seed, e),
            config.add_extra_token_to_sequence,
            True,
            name=f"{prefix} (train split, epoch {e})",
            max_sequence_length=max_length,
        )

    first = epoch(0)
    n = len(first)
    dtypes = (first.sample_index.dtype.str, first.shuffle_index.dtype.str)
    count = blend_schedule.epochs_needed(drawn, n, prefix)
    if count == 1:
        return first, dtypes, 1
    per_doc = len(first.document_index)
    if count * per_doc > np.iinfo(np.int64).max // 4:
        raise ValueError(f"{prefix}: {count} epochs of {per_doc} documents overflow int64")
    sample_dtype = np.int64 if count * per_doc > _INT32_MAX else first.sample_index.dtype
    shuffle_dtype = np.int64 if count * (n + 1) > _UINT32_LIMIT else first.shuffle_index.dtype
    docs = np.empty(count * per_doc, dtype=first.document_index.dtype)
    samples = np.empty((count * (n + 1), 2), dtype=sample_dtype)
    shuffle = np.empty(count * n, dtype=shuffle_dtype)
    for e in range(count):
        maps = first if e == 0 else epoch(e)
        docs[e * per_doc : (e + 1) * per_doc] = maps.document_index
        block = samples[e * (n + 1) : (e + 1) * (n + 1)]
        block[:] = maps.sample_index
        block[:, 0] += e * per_doc
        shuffle[e * n : (e + 1) * n] = maps.shuffle_index  # widened first, then moved
        shuffle[e * n : (e + 1) * n] += shuffle.dtype.type(e * (n + 1))
    return gpt.GPTIndexMaps(docs, samples, shuffle), dtypes, count

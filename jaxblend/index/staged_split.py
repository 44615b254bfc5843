"""The arrays of a staged train split, in the layout every `SplitMaps` reads.

A staged split (`jaxblend.index.blend_schedule`) is stored exactly like a blended split: the
blend's `dataset_index` / `dataset_sample_index` and each dataset's document, sample and shuffle
indices end to end with `offsets[j] = (document, sample, shuffle starts, sample count)`. What
differs is inside a dataset's block: its E epochs, each a one-epoch GPT map, are laid end to end:

* `document_index`: the epochs' document indices one after the other (E x D entries);
* `sample_index`: epoch e's `n + 1` rows, their document positions moved by `e * D`;
* `shuffle_index`: epoch e's permutation of `[0, n)` moved to rows `e * (n + 1) + ...`, at
  positions `[e * n, (e + 1) * n)`, so dataset sample `e * n + q` is epoch e's sample q.

The read kernel (`split_maps._spans_kernel`) then resolves a staged sample like any blended one,
and `<split>.epochs` (E of each dataset) lets `SplitMaps.constituent` give back any one epoch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxblend.index import blend_schedule, gpt, split_resolution
from jaxblend.index import split as split_lib
from jaxblend.index.config import DatasetInfo, GPTDataConfig

_INT32_MAX = int(np.iinfo(np.int32).max)
_UINT32_LIMIT = int(np.iinfo(np.uint32).max) - 1


def build_staged_arrays(
    config: GPTDataConfig,
    spec: split_resolution.SplitSpec,
    infos: dict[str, DatasetInfo],
    max_lengths: dict[str, int],
    position: dict[str, int],
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays (named `<split>.<array>`) and metadata of the staged split `spec`.

    Args:
      config: the data configuration (seq_length, seed, extra token).
      spec: the resolved staged split.
      infos: prefix -> DatasetInfo.
      max_lengths: prefix -> longest sequence.
      position: prefix -> its position among the plan's prefixes.

    Raises:
      ValueError: samples drawn from a dataset with no complete sample, or overflowing counts.
    """
    dataset_index, dataset_sample_index, drawn = blend_schedule.staged_blend_indices(
        spec.schedule, spec.num_samples
    )
    import tqdm  # only where maps are built: a cached start does not load it

    blocks = []
    progress = tqdm.tqdm(
        total=len(spec.prefixes), desc="index maps (train, staged)",
        disable=len(spec.prefixes) < 16, leave=False,
    )
    for j, prefix in enumerate(spec.prefixes):
        blocks.append(
            _dataset_epochs(config, spec, prefix, infos[prefix], max_lengths[prefix], int(drawn[j]))
        )
        progress.update(1)
    progress.close()
    name = spec.name
    arrays = {
        f"{name}.dataset_index": dataset_index,
        f"{name}.dataset_sample_index": dataset_sample_index,
    }
    arrays.update(_concatenated(name, blocks, [position[p] for p in spec.prefixes]))
    meta = {
        "prefixes": [position[p] for p in spec.prefixes],
        "megatron_dtypes": [list(b[4]) for b in blocks],
        "blended": True,
        "staged": True,
    }
    return arrays, meta


def _dataset_epochs(
    config: GPTDataConfig,
    spec: split_resolution.SplitSpec,
    prefix: str,
    info: DatasetInfo,
    max_length: int,
    drawn: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, tuple[str, str], int]:
    """One dataset's epochs end to end: `(document_index, sample_index, shuffle_index,
    samples per epoch, Megatron's (sample, shuffle) dtypes, epochs)`."""
    documents = split_lib.split_indices(spec.bookend, info.num_sequences)

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
        return first.document_index, first.sample_index, first.shuffle_index, n, dtypes, 1
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
    return docs, samples, shuffle, n, dtypes, count


def _concatenated(
    name: str, blocks: list[tuple], constituent_prefix: list[int]
) -> dict[str, np.ndarray]:
    sample_dtype = np.result_type(*[b[1].dtype for b in blocks])
    shuffle_dtype = np.result_type(*[b[2].dtype for b in blocks])
    offsets = np.zeros((len(blocks), 4), dtype=np.int64)
    doc_total = sample_total = shuffle_total = 0
    for j, (docs, samples, shuffle, n, _, count) in enumerate(blocks):
        offsets[j] = (doc_total, sample_total, shuffle_total, n * count)
        doc_total += len(docs)
        sample_total += len(samples)
        shuffle_total += len(shuffle)
    return {
        f"{name}.document_index": np.concatenate([b[0] for b in blocks]),
        f"{name}.sample_index": np.concatenate(
            [b[1].astype(sample_dtype, copy=False) for b in blocks]
        ).reshape(-1, 2),
        f"{name}.shuffle_index": np.concatenate(
            [b[2].astype(shuffle_dtype, copy=False) for b in blocks]
        ),
        f"{name}.offsets": offsets,
        f"{name}.constituent_prefix": np.array(constituent_prefix, dtype=np.int64),
        f"{name}.epochs": np.array([b[5] for b in blocks], dtype=np.int64),
    }

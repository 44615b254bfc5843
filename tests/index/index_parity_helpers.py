"""Helpers for the Megatron-Core parity tests: tiny datasets, Megatron builds, comparisons."""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np

from jaxblend import index

EOD = 0


class TinyTokenizer:
    """The few tokenizer attributes Megatron's GPTDataset reads (pad = -1 = our padding)."""

    vocab_size = None
    eod = EOD
    pad = -1

    @property
    def unique_identifiers(self) -> dict:
        return {"class": "TinyTokenizer"}


def write_dataset(prefix: str, documents: list[list[np.ndarray]], dtype=np.uint16) -> str:
    """Writes documents (lists of sequences) with Megatron's own IndexedDatasetBuilder."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for document in documents:
        for sequence in document:
            builder.add_item(torch.from_numpy(np.asarray(sequence, dtype=np.int64)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    return prefix


def merge_datasets(prefix: str, parts: list[str], dtype=np.uint16) -> str:
    """Merges datasets with Megatron's builder (`add_index`)."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for part in parts:
        builder.add_index(part)
    builder.finalize(prefix + ".idx")
    return prefix


def random_documents(
    rng: np.random.Generator,
    num_documents: int,
    max_length: int = 60,
    sequences_per_document: int = 1,
    vocab: int = 1000,
) -> list[list[np.ndarray]]:
    docs = []
    for _ in range(num_documents):
        seqs = []
        for _ in range(int(rng.integers(1, sequences_per_document + 1))):
            n = int(rng.integers(1, max_length + 1))
            seq = rng.integers(1, vocab, n)
            seq[-1] = EOD
            seqs.append(seq)
        docs.append(seqs)
    return docs


def open_megatron(prefix: str):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    return IndexedDataset(prefix, multimodal=False, mmap=True)


def info_of(prefix: str) -> index.DatasetInfo:
    ds = open_megatron(prefix)
    with open(prefix + ".idx", "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    fingerprint = f"{digest}:{os.path.getsize(prefix + '.bin')}"
    # Copies: Megatron closes its index memory map when the reader is garbage collected.
    return index.DatasetInfo(
        prefix, np.array(ds.sequence_lengths), np.array(ds.document_indices), fingerprint
    )


def megatron_build(
    *,
    blend=None,
    blend_per_split=None,
    split=None,
    seq_length: int,
    seed: int,
    num_samples,
    extra: bool = True,
    drop_last_valid: bool = True,
    surplus: float = 0.005,
):
    """Megatron's BlendedMegatronDatasetBuilder with GPTDatasetConfig (no torch.distributed)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    prefixes = []
    for b in [blend] + list(blend_per_split or []):
        if b:
            prefixes += get_blend_from_list(list(b))[0]
    for p in prefixes:
        # Megatron caches GPT indices under <prefix>/cache with a key that omits
        # add_extra_token_to_sequence: clear it so every build is fresh.
        shutil.rmtree(p, ignore_errors=True)
    config = GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq_length,
        blend=get_blend_from_list(list(blend)) if blend else None,
        blend_per_split=[get_blend_from_list(list(b)) if b else None for b in blend_per_split]
        if blend_per_split
        else None,
        split=split,
        path_to_cache=None,
        tokenizer=TinyTokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=drop_last_valid,
        mid_level_dataset_surplus=surplus,
    )
    datasets = BlendedMegatronDatasetBuilder(
        GPTDataset, list(num_samples), lambda: True, config
    ).build()
    for p in prefixes:
        shutil.rmtree(p, ignore_errors=True)
    return datasets


def window_of(split_maps: index.SplitMaps, readers: dict, i: int) -> np.ndarray:
    """Our raw token window of sample i, padded with -1."""
    spans = split_maps.spans(np.array([i], dtype=np.int64))
    parts = []
    for d, q, o, n in zip(spans.dataset, spans.sequence, spans.offset, spans.length):
        reader = readers[split_maps.dataset_names[int(d)]]
        parts.append(np.asarray(reader.get(int(q), offset=int(o), length=int(n)), dtype=np.int64))
    text = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    out = np.full(split_maps.window, -1, dtype=np.int64)
    out[: len(text)] = text
    return out


def megatron_window(dataset, i: int) -> np.ndarray:
    from megatron.core.datasets.blended_dataset import BlendedDataset

    if isinstance(dataset, BlendedDataset):
        d = int(dataset.dataset_index[i])
        k = int(dataset.dataset_sample_index[i])
        return dataset.datasets[d]._query_document_sample_shuffle_indices(k)[0]
    return dataset._query_document_sample_shuffle_indices(i)[0]


def assert_same_array(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    theirs = np.asarray(theirs)
    assert ours.dtype == theirs.dtype, f"{what}: dtype {ours.dtype} != megatron {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != megatron {theirs.shape}"
    assert np.array_equal(ours, theirs), f"{what}: values differ from megatron"


def assert_split_parity(
    split_maps: index.SplitMaps | None, dataset, readers: dict, num_windows: int = 24
) -> None:
    """Every index array and the first windows equal Megatron's."""
    from megatron.core.datasets.blended_dataset import BlendedDataset

    if dataset is None:
        assert split_maps is None
        return
    assert split_maps is not None, "megatron built this split, we did not"
    assert len(split_maps) == len(dataset), (
        f"{split_maps.name}: length {len(split_maps)} != {len(dataset)}"
    )
    if isinstance(dataset, BlendedDataset):
        assert split_maps.is_blended
        assert_same_array(split_maps.dataset_index, dataset.dataset_index, "dataset_index")
        assert_same_array(
            split_maps.dataset_sample_index, dataset.dataset_sample_index, "dataset_sample_index"
        )
        constituents = dataset.datasets
    else:
        assert not split_maps.is_blended
        constituents = [dataset]
    assert split_maps.num_datasets == len(constituents)
    for j, theirs in enumerate(constituents):
        ours = split_maps.constituent(j)
        assert_same_array(ours.document_index, theirs.document_index, f"ds{j} document_index")
        assert_same_array(ours.sample_index, theirs.sample_index, f"ds{j} sample_index")
        assert_same_array(ours.shuffle_index, theirs.shuffle_index, f"ds{j} shuffle_index")
    n = len(dataset)
    picks = list(range(min(num_windows, n))) + ([n - 1] if n else [])
    for i in picks:
        np.testing.assert_array_equal(
            window_of(split_maps, readers, i), megatron_window(dataset, i), err_msg=f"sample {i}"
        )

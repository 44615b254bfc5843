"""Cheap estimates of a data configuration's index maps, without building them (preflight).

`estimate_plan(config, infos)` resolves the splits and blends with the same code as
`build_data_maps` (`split_resolution`), computes for every (split, dataset) the tokens, epochs
and sample count the maps will have, their dtypes and sizes in bytes, whether the cache already
holds them, and lists problems (a split with no tokens asked for samples, counts overflowing the
index dtypes). Cost: O(datasets + sequences) sums, no shuffles.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from jaxblend.index import (
    blend_index,
    bucket_cache,
    cache,
    data_maps,
    gpt,
    sample_index,
    shuffle_index,
    split_resolution,
)
from jaxblend.index import split as split_lib
from jaxblend.index.config import GPTDataConfig


@dataclasses.dataclass(frozen=True)
class DatasetEstimate:
    """One dataset's maps within one split."""

    split: str
    prefix: str
    sequences: int
    tokens: int
    requested: int | None
    epochs: int
    samples: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class PlanEstimate:
    """Every split's estimate plus the cache status."""

    fingerprint: str
    cached: bool
    cache_path: str | None
    datasets: list[DatasetEstimate]
    blend_sizes: dict[str, int]
    total_bytes: int
    problems: list[str]


def estimate_plan(config: GPTDataConfig, infos: data_maps.InfoSource) -> PlanEstimate:
    """Estimates the index maps of `config` (see the module docstring).

    Raises:
      ValueError: for configuration errors `build_data_maps` would also raise before building.
    """
    specs = split_resolution.resolve_splits(config)
    prefixes = data_maps.config_prefixes(config)
    info_by_prefix = {p: split_resolution.dataset_info(infos, p) for p in prefixes}
    key = data_maps.plan_fingerprint(config, prefixes, info_by_prefix)
    problems: list[str] = []
    path, cached = _cache_status(config, key, specs, problems)
    extra = int(config.add_extra_token_to_sequence)
    s = int(config.seq_length)
    estimates: list[DatasetEstimate] = []
    blend_sizes: dict[str, int] = {}
    total = 0
    for spec in specs:
        if spec is None:
            continue
        if spec.kind == "weighted":
            blend_sizes[spec.name] = sum(spec.blend_targets())
        keep_partial = not spec.drop_last_partial
        per_dataset_samples = []
        for prefix, request in zip(spec.prefixes, spec.dataset_requests(), strict=True):
            info = info_by_prefix[prefix]
            begin, end = split_lib.split_range(spec.bookend, info.num_sequences)
            tokens = int(np.sum(info.sequence_lengths[begin:end], dtype=np.int64))
            if tokens == 0:
                if request:
                    problems.append(
                        f"{prefix}: the {spec.name} split has no tokens but {request} samples are requested"
                    )
                estimates.append(DatasetEstimate(spec.name, prefix, end - begin, 0, request, 0, 0, 0))
                per_dataset_samples.append(0)
                continue
            epochs = gpt.num_epochs_for(tokens, request, s, bool(extra))
            total_tokens = epochs * tokens - extra
            samples = -(-total_tokens // s) if keep_partial else total_tokens // s
            docs = epochs * (end - begin)
            si = sample_index.sample_index_dtype(docs, int(info.sequence_lengths.max()))
            sh = shuffle_index.shuffle_index_dtype(samples)
            size = docs * 4 + (samples + 1) * 2 * si.itemsize + samples * sh.itemsize
            if docs > np.iinfo(np.int32).max:
                problems.append(f"{prefix} ({spec.name}): document index of {docs} entries exceeds int32")
            estimates.append(DatasetEstimate(spec.name, prefix, end - begin, tokens, request, epochs, samples, size))
            per_dataset_samples.append(samples)
            total += size
        if spec.kind == "unweighted":
            available = sum(per_dataset_samples)
            blend_sizes[spec.name] = available if spec.num_samples is None else min(spec.num_samples, available)
        if spec.name in blend_sizes:
            id_dtype = blend_index.dataset_index_dtype(len(spec.prefixes))
            total += blend_sizes[spec.name] * (id_dtype.itemsize + 8)
    return PlanEstimate(key, cached, path, estimates, blend_sizes, total, problems)


def _cache_status(
    config: GPTDataConfig,
    key: str,
    specs: list[split_resolution.SplitSpec | None],
    problems: list[str],
) -> tuple[str | None, bool]:
    """Where the plan's cache entries are and whether they hold every split, every byte checked
    against its manifest; a corrupt entry is reported in `problems`.

    Cached means the whole plan, or each existing split on its own (as single-split tools build).

    Returns:
      (the entry path or URL(s), or None without a cache; whether every split is cached intact).
    """
    if not config.cache_dir:
        return None, False
    remote = bucket_cache.is_url(config.cache_dir)
    where = bucket_cache.entry_url if remote else cache.entry_path

    def found(names: list[str]) -> str | None:
        if remote:
            exists = (bucket_cache.committed(config.cache_dir, n) for n in names)
        else:
            exists = (os.path.exists(os.path.join(config.cache_dir, n, cache.MANIFEST)) for n in names)
        return next((n for n, e in zip(names, exists) if e), None)

    path = where(config.cache_dir, key)
    entries = [key] if found([key]) else [
        found(data_maps.cache_entries(key, (s.name,))) for s in specs if s is not None
    ]
    if not entries or not all(entries):
        return path, False
    entries = list(dict.fromkeys(entries))
    cached = True
    for name in entries:  # every byte against the manifest's SHA-256
        check = bucket_cache.check if remote else cache.check
        problem = check(config.cache_dir, name)
        if problem is not None:
            cached = False
            problems.append(f"index cache entry is corrupt ({problem}); it will be rebuilt")
    return ", ".join(where(config.cache_dir, n) for n in entries), cached

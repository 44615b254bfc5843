"""Cheap estimates of a data configuration's index maps, without building them (preflight).

`estimate_plan(config, infos)` resolves the splits and blends with the same code as
`build_data_maps` (`split_resolution`), computes for every (split, dataset) the tokens, epochs
and sample count the maps will have, their dtypes and sizes in bytes, and lists problems (a split
with no tokens asked for samples, counts overflowing the index dtypes). Cost: O(datasets +
sequences) sums, no shuffles. Pure: whether the maps are already cached is the map store's answer
(`jaxblend.map_store.data_maps_status`).

A packed configuration (`packing="best_fit"`) is estimated by packing each dataset's first epoch
in memory (`packed_maps.build_packed_epoch`, O(sequences log sequences), nothing cached): its rows,
padding and split documents are exact for that epoch (`PackingEstimate`); later epochs, shuffled
with other seeds, hold the same tokens in about as many rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxblend.index import (
    blend_index,
    data_maps,
    gpt,
    packed_maps,
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
class PackingEstimate:
    """One dataset's first packed epoch within one split (`packing="best_fit"`).

    Attributes:
      documents: sequences of the split with tokens.
      split_documents: sequences longer than a row, cut into row-sized pieces.
      rows: rows of the epoch.
      padding: padding tokens of the epoch's rows.
      row_tokens: tokens per row (`seq_length + extra`).
    """

    split: str
    prefix: str
    documents: int
    split_documents: int
    rows: int
    padding: int
    row_tokens: int

    @property
    def padding_fraction(self) -> float:
        """Padding over all row tokens of the epoch."""
        return self.padding / max(1, self.rows * self.row_tokens)


@dataclasses.dataclass(frozen=True)
class PlanEstimate:
    """Every split's estimate.

    Attributes:
      fingerprint: the maps' fingerprint (the map store's key).
      specs: the resolved splits (what a map store checks for cached entries).
      datasets: one estimate per (split, dataset).
      blend_sizes: samples of each blended split.
      total_bytes: every map's size.
      problems: what would fail at build time.
      packing: with packing, one first-epoch estimate per (split, dataset); else empty.
    """

    fingerprint: str
    specs: list[split_resolution.SplitSpec | None]
    datasets: list[DatasetEstimate]
    blend_sizes: dict[str, int]
    total_bytes: int
    problems: list[str]
    packing: list[PackingEstimate] = dataclasses.field(default_factory=list)


def estimate_plan(config: GPTDataConfig, infos: data_maps.InfoSource) -> PlanEstimate:
    """Estimates the index maps of `config` (see the module docstring).

    Raises:
      ValueError: for configuration errors `build_data_maps` would also raise before building.
    """
    resolved = data_maps.DataMapsSpec.resolve(config, infos)
    specs, info_by_prefix = resolved.specs, resolved.infos
    problems: list[str] = []
    extra = int(config.add_extra_token_to_sequence)
    s = int(config.seq_length)
    estimates: list[DatasetEstimate] = []
    packed: list[PackingEstimate] = []
    blend_sizes: dict[str, int] = {}
    total = 0
    for spec in specs:
        if spec is None:
            continue
        if spec.kind == "weighted":
            blend_sizes[spec.name] = sum(spec.blend_targets())
        elif spec.kind == "staged":
            blend_sizes[spec.name] = spec.num_samples
        samples_of_split = 0
        for prefix, request in zip(spec.prefixes, spec.dataset_requests(), strict=True):
            info = info_by_prefix[prefix]
            begin, end = split_lib.split_range(spec.bookend, info.num_sequences)
            tokens = int(np.sum(info.sequence_lengths[begin:end], dtype=np.int64))
            epochs = samples = size = 0
            if tokens == 0:
                if request:
                    problems.append(
                        f"{prefix}: the {spec.name} split has no tokens but {request} samples are requested"
                    )
            elif config.is_packed:
                epoch = packed_maps.build_packed_epoch(
                    info.sequence_lengths, np.arange(begin, end), s + extra, config.seed,
                    config.packing_window, config.packing_overflow,
                )
                rows = len(epoch)
                epochs = 1 if not request else max(1, -(-request // rows))
                samples = epochs * rows
                size = epochs * (len(epoch.sequence) * 12 + rows * 8) + 8
                packed.append(PackingEstimate(
                    spec.name, prefix, int(np.count_nonzero(info.sequence_lengths[begin:end])),
                    epoch.split_documents, rows, epoch.padding, s + extra,
                ))
            else:
                if spec.kind == "staged":
                    # One-epoch maps end to end, as many as the stages draw (at most `request`).
                    per_epoch = (tokens - extra) // s
                    epochs = max(1, -(-request // per_epoch)) if per_epoch else 1
                    if request and not per_epoch:
                        problems.append(
                            f"{prefix}: the staged train split draws up to {request} samples but "
                            "the dataset has no complete sample"
                        )
                    samples = epochs * per_epoch
                    rows = epochs * (samples // epochs + 1)
                else:
                    epochs = gpt.num_epochs_for(tokens, request, s, bool(extra))
                    total_tokens = epochs * tokens - extra
                    samples = total_tokens // s if spec.drop_last_partial else -(-total_tokens // s)
                    rows = samples + 1
                docs = epochs * (end - begin)
                si = sample_index.sample_index_dtype(docs, int(info.sequence_lengths.max()))
                sh = shuffle_index.shuffle_index_dtype(samples)
                size = docs * 4 + rows * 2 * si.itemsize + samples * sh.itemsize
                if docs > np.iinfo(np.int32).max:
                    problems.append(
                        f"{prefix} ({spec.name}): document index of {docs} entries exceeds int32"
                    )
            estimates.append(
                DatasetEstimate(spec.name, prefix, end - begin, tokens, request, epochs, samples, size)
            )
            samples_of_split += samples
            total += size
        if spec.kind == "unweighted":
            n = spec.num_samples
            blend_sizes[spec.name] = samples_of_split if n is None else min(n, samples_of_split)
        if spec.name in blend_sizes:
            id_dtype = blend_index.dataset_index_dtype(len(spec.prefixes))
            total += blend_sizes[spec.name] * (id_dtype.itemsize + 8)
    return PlanEstimate(resolved.key, specs, estimates, blend_sizes, total, problems, packed)

"""The dataset-level entry point: a `GPTDataConfig` + dataset facts -> every split's index maps.

`build_data_maps` reproduces Megatron-Core's `BlendedMegatronDatasetBuilder` decisions for GPT
data, in memory and without I/O: `DataMapsSpec` resolves the splits and computes the cache key,
`build_arrays` builds the arrays (asking an optional `PerDatasetMapsProvider` for ready-made
per-dataset maps first) and `data_maps_from_arrays` turns arrays and metadata, built or loaded,
into `DataMaps`. Caching them is the map store's job (`jaxblend.map_store.load_or_build_data_maps`).
Which datasets each split blends, and how many samples it asks of each, is decided in
`split_resolution` (shared with `estimate`; docs/format.md, "Blends"). Weighted blends normalize
the (already normalized) weights once more, and the size of a weighted blend of N samples,
`sum_j ceil(N w_j)`, may exceed N by float rounding, as in Megatron. A split with no tokens and
no requested count is empty (Megatron's behaviour); requesting samples from it raises ValueError
(Megatron loops forever). A `train_schedule` makes the train split a staged blend
(`staged_split`); `history_fingerprint` names its first samples, which a future edit of the
schedule leaves unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import logging

from jaxblend import identity
from jaxblend.index import (
    blend_index,
    blend_schedule,
    blend_spec,
    gpt,
    maps_key,
    packed_maps,
    split_resolution,
    staged_split,
)
from jaxblend.index import split as split_lib
from jaxblend.index.config import DatasetInfo, GPTDataConfig
from jaxblend.index.per_dataset_maps import DatasetMapsRequest, PerDatasetMapsProvider
from jaxblend.index.split_maps import SplitMaps
from jaxblend.validation import require_choice, require_int

PLAN_FORMAT = "gpt-plan"
PLAN_FORMAT_VERSION = 2
HISTORY_FORMAT = "gpt-train-history"
HISTORY_FORMAT_VERSION = 1

InfoSource = split_resolution.InfoSource


def plan_fingerprint(
    config: GPTDataConfig, prefixes: list[str], infos: dict[str, DatasetInfo]
) -> str:
    """The plan's identity (its cache key): every setting that changes the maps, the index code
    and the datasets' content fingerprints (never their paths; docs/format.md, "Fingerprint")."""
    position = {p: k for k, p in enumerate(prefixes)}

    def encode(b: blend_spec.Blend | None) -> Any:
        if b is None:
            return None
        return {
            "datasets": [position[p] for p in b.prefixes],
            "weights": None if b.weights is None else [repr(float(w)) for w in b.weights],
        }

    schedule = config.train_schedule
    per_split = config.blend_per_split
    if per_split is not None and schedule is not None:
        per_split = (None, *per_split[1:])  # the schedule replaces the train entry
    return identity.fingerprint(
        PLAN_FORMAT,
        PLAN_FORMAT_VERSION,
        maps_layout=maps_key.MAPS_LAYOUT,
        index_code=maps_key.code_digest(),
        blend=encode(config.blend),
        blend_per_split=None if per_split is None else [encode(b) for b in per_split],
        train_schedule=identity.OMIT
        if schedule is None
        else [{"start": s.start_sample, "blend": encode(s.blend)} for s in schedule.stages],
        split=config.split if config.blend is not None else None,
        **config.sample_fields(),
        datasets=[infos[p].fingerprint for p in prefixes],
        **config.packing_fields(),
    )


@dataclasses.dataclass(eq=False)
class DataMaps:
    """Every split of a data configuration, built or loaded from the cache.

    Attributes:
      config: the `GPTDataConfig`.
      prefixes: the distinct dataset prefixes, in order of first appearance.
      fingerprint: stable identity of config + dataset contents (cache key, resume check).
      _splits: split name -> its maps (None: no such split), for the splits built.
      cache_path: the map-store entry directory the arrays are memory-mapped from, or None.
      built: the split names this plan was asked to build.
    """

    config: GPTDataConfig
    prefixes: tuple[str, ...]
    fingerprint: str
    _splits: dict[str, SplitMaps | None]
    cache_path: str | None
    built: tuple[str, ...] = split_lib.SPLIT_NAMES

    def split(self, name: str) -> SplitMaps | None:
        """The plan of split "train", "valid" or "test", or None if the split does not exist.

        Raises:
          ValueError: an unknown name, or a split this plan was not asked to build.
        """
        require_choice("split name", name, split_lib.SPLIT_NAMES)
        if name not in self.built:
            raise ValueError(f"the {name} split was not built (this plan holds {self.built})")
        return self._splits[name]

    def __repr__(self) -> str:
        sizes = {k: (None if v is None else len(v)) for k, v in self._splits.items()}
        return f"DataMaps(fingerprint={self.fingerprint!r}, prefixes={len(self.prefixes)}, splits={sizes})"


def config_prefixes(config: GPTDataConfig) -> list[str]:
    """Every distinct prefix a configuration names, in order of first appearance (a train
    schedule's datasets first; the train entry of `blend_per_split` is then not used)."""
    schedule = config.train_schedule
    blends: list = [] if schedule is None else [s.blend for s in schedule.stages]
    if config.blend is not None:
        blends.append(config.blend)
    elif config.blend_per_split is not None:
        blends.extend(config.blend_per_split[1:] if schedule else config.blend_per_split)
    return blend_spec.blend_prefixes(blends)


def _train_spec(config: GPTDataConfig) -> split_resolution.SplitSpec:
    spec = split_resolution.resolve_splits(config, ("train",))[0]
    if spec is None:
        raise ValueError("the configuration has no train split to fingerprint the history of")
    return spec


def history_prefixes(config: GPTDataConfig, num_samples: int) -> list[str]:
    """The datasets whose content `history_fingerprint(config, ..., num_samples)` covers: those
    of the train schedule's stages holding samples `[0, num_samples)`, else (no schedule) every
    dataset of the train split. Only their fingerprints are looked up.

    Raises:
      ValueError: a config without a train split.
    """
    if config.train_schedule is None:
        return list(_train_spec(config).prefixes)
    cut = config.train_schedule.truncated(int(num_samples))
    return [] if cut is None else cut.prefixes()


def history_fingerprint(
    config: GPTDataConfig, infos: InfoSource, num_samples: int
) -> str:
    """The identity of the train split's first `num_samples` samples.

    With a `train_schedule` it covers what those samples depend on: the schedule cut to the
    stages holding samples `[0, num_samples)` (the last kept stage's end is left out), the
    weights as the blends use them, the train portion of the documents, seq_length, seed, the
    extra token and the content of the datasets those stages use. So it is equal for two
    schedules that differ only from sample `num_samples` on (their first samples are identical,
    see `blend_schedule`) and differs when a stage before it changes. Without a schedule the train
    split's samples depend on all its settings, so it covers all of them.

    The index code is not part of it (the plan fingerprint has it): the staged algorithm is
    named by `HISTORY_FORMAT_VERSION`, bumped if it ever changes meaning.

    Args:
      infos: prefix -> DatasetInfo (only content fingerprints are read).
      num_samples: samples consumed (>= 0).

    Raises:
      ValueError: a negative count, missing dataset info, or a config without a train split.
    """
    require_int("num_samples", num_samples, 0)
    spec = _train_spec(config)
    prefixes = history_prefixes(config, num_samples)
    if config.train_schedule is None:
        fields: dict[str, Any] = {
            "train": {
                "kind": spec.kind,
                "num_samples": spec.num_samples,
                "weights": None if spec.weights is None else [float(w) for w in spec.weights],
                "surplus": float(spec.surplus),
            },
        }
    else:
        cut = config.train_schedule.truncated(int(num_samples))
        position = {p: k for k, p in enumerate(prefixes)}
        fields = {
            "stages": [
                {
                    "start": s.start_sample,
                    "datasets": [position[p] for p in s.blend.prefixes],
                    "weights": [float(w) for w in s.weights()],
                }
                for s in ([] if cut is None else cut.stages)
            ],
            "num_samples": int(num_samples),
        }
    return identity.fingerprint(
        HISTORY_FORMAT,
        HISTORY_FORMAT_VERSION,
        datasets=[split_resolution.dataset_info(infos, p).fingerprint for p in prefixes],
        seq_length=int(config.seq_length),
        seed=int(config.seed),
        add_extra_token_to_sequence=bool(config.add_extra_token_to_sequence),
        bookend=[float(b) for b in spec.bookend],
        **config.packing_fields(),
        **fields,
    )


def cache_entries(key: str, splits: Sequence[str] | None = None) -> list[str]:
    """The cache entries that can serve `splits` of plan `key`, best first (whole plan first)."""
    wanted = split_lib.wanted_splits(splits)
    if wanted == split_lib.SPLIT_NAMES:
        return [key]
    return [key, f"{key}-{'-'.join(wanted)}"]


@dataclasses.dataclass(frozen=True)
class DataMapsSpec:
    """What to build for a data configuration: its resolved splits, datasets and cache key.

    Attributes:
      wanted: the split names asked for, in canonical order.
      specs: the resolution of every wanted split (None for a split with no datasets).
      prefixes: the distinct dataset prefixes, in order of first appearance.
      infos: prefix -> DatasetInfo.
      key: the maps' fingerprint (`plan_fingerprint`), the map store's key.
    """

    config: GPTDataConfig
    wanted: tuple[str, ...]
    specs: list[split_resolution.SplitSpec | None]
    prefixes: list[str]
    infos: dict[str, DatasetInfo]
    key: str

    @classmethod
    def resolve(
        cls, config: GPTDataConfig, infos: InfoSource, splits: Sequence[str] | None = None
    ) -> DataMapsSpec:
        """Resolves `splits` (default: all) of `config` over `infos` (a mapping or callable).

        Raises:
          ValueError: unknown splits, no non-empty split, or missing dataset info.
        """
        wanted = split_lib.wanted_splits(splits)
        specs = split_resolution.resolve_splits(config, wanted)
        prefixes = config_prefixes(config)
        if not prefixes:
            raise ValueError("the configuration has no non-empty split")
        info_by_prefix = {p: split_resolution.dataset_info(infos, p) for p in prefixes}
        key = plan_fingerprint(config, prefixes, info_by_prefix)
        return cls(config, wanted, specs, prefixes, info_by_prefix, key)

    @property
    def entries(self) -> list[str]:
        """The entry names that can serve these splits, best first (whole plan first)."""
        return cache_entries(self.key, self.wanted)

    @property
    def entry(self) -> str:
        """The entry name these splits are saved under."""
        return self.entries[-1]


def build_data_maps(
    config: GPTDataConfig,
    infos: InfoSource,
    splits: Sequence[str] | None = None,
    *,
    provider: PerDatasetMapsProvider | None = None,
) -> DataMaps:
    """Builds the index maps of every split, or of `splits`, in memory (no cache; for a cached
    build use `jaxblend.map_store.load_or_build_data_maps`).

    Each split's maps depend only on its own settings, so building a subset gives the same maps
    (and the same fingerprint) as building everything; a subset only skips the others (and their
    checks, e.g. a weighted blend's sample count).

    Args:
      infos: prefix -> DatasetInfo, as a mapping or a callable.
      splits: the split names to build (default: all).
      provider: offers ready-made per-dataset maps (e.g. Megatron's cache), or None.

    Returns:
      The `DataMaps`.

    Raises:
      ValueError: missing dataset info, a dataset without tokens, samples requested from an empty
        split, a blend that oversamples a dataset, or counts overflowing the index dtypes.
    """
    spec = DataMapsSpec.resolve(config, infos, splits)
    arrays, meta = build_arrays(spec, provider)
    return data_maps_from_arrays(spec, arrays, meta)


def build_arrays(
    spec: DataMapsSpec, provider: PerDatasetMapsProvider | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and JSON metadata of `spec`'s maps (what a map store saves).

    Raises:
      ValueError: as `build_data_maps`.
    """
    prefixes, infos = spec.prefixes, spec.infos
    for p in prefixes:
        if infos[p].num_sequences == 0 or not np.any(infos[p].sequence_lengths):
            raise ValueError(f"dataset {p!r} has no tokens ({infos[p].num_sequences} sequences)")
    length_offsets = np.zeros(len(prefixes) + 1, dtype=np.int64)
    length_offsets[1:] = np.cumsum([infos[p].num_sequences for p in prefixes])
    arrays: dict[str, np.ndarray] = {
        "lengths": np.concatenate([infos[p].sequence_lengths for p in prefixes]).astype(np.int32),
        "length_offsets": length_offsets,
    }
    meta: dict[str, Any] = {"prefixes": prefixes, "splits": {}}
    max_lengths = {p: int(infos[p].sequence_lengths.max()) for p in prefixes}
    for split in spec.specs:
        if split is not None:
            out, meta["splits"][split.name] = _build_split(spec, split, max_lengths, provider)
            arrays.update(out)
    summary = {s.name: len(arrays.get(f"{s.name}.dataset_index", ())) for s in spec.specs if s}
    logging.info(
        "built index maps %s for %d datasets (blend sizes %s)", spec.entry, len(spec.prefixes),
        summary,
    )
    return arrays, meta


def data_maps_from_arrays(
    spec: DataMapsSpec,
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    cache_path: str | None = None,
) -> DataMaps:
    """`DataMaps` over arrays and metadata written by `build_arrays` (built, or loaded from a map
    store entry at `cache_path`).

    Raises:
      KeyError, TypeError, ValueError, IndexError, AttributeError: the arrays or metadata are not
        what `build_arrays` writes (e.g. a hand-edited entry); the map store rebuilds such an entry.
    """
    config = spec.config
    splits: dict[str, SplitMaps | None] = dict.fromkeys(spec.wanted)
    for name in spec.wanted:
        split_meta = meta["splits"].get(name)
        if split_meta is None:
            continue
        common = {
            "name": name,
            "dataset_names": tuple(spec.prefixes[p] for p in split_meta["prefixes"]),
            "arrays": {
                key[len(name) + 1 :]: value
                for key, value in arrays.items()
                if key.startswith(f"{name}.")
            },
            "lengths": arrays["lengths"],
            "length_offsets": arrays["length_offsets"],
            "seq_length": config.seq_length,
            "add_extra_token": config.add_extra_token_to_sequence,
        }
        if split_meta.get("packed"):
            splits[name] = packed_maps.PackedSplitMaps(
                split_documents=split_meta["split_documents"], window=config.packing_window,
                **common,
            )
        else:
            splits[name] = SplitMaps(
                megatron_dtypes=[tuple(d) for d in split_meta["megatron_dtypes"]], **common
            )
    return DataMaps(spec.config, tuple(spec.prefixes), spec.key, splits, cache_path, spec.wanted)


def _build_split(
    spec: DataMapsSpec,
    split: split_resolution.SplitSpec,
    max_lengths: dict[str, int],
    provider: PerDatasetMapsProvider | None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays of one split (named `<split>.<array>`) and its metadata.

    Every kind of split is laid out alike: the blend's `dataset_index`/`dataset_sample_index`
    (none for a single dataset), then its datasets' maps end to end (GPT maps, a staged dataset's
    epochs of GPT maps, or packed rows), each dataset's maps from `build`.
    """
    config, name = spec.config, split.name
    if split.kind == "staged":
        dataset_index, dataset_sample_index, drawn = blend_schedule.staged_blend_indices(
            split.schedule, split.num_samples
        )
        requests = [int(n) for n in drawn]
    else:
        requests = split.dataset_requests()

    def build(prefix: str, request: int | None):
        info = spec.infos[prefix]
        documents = split_lib.split_indices(split.bookend, info.num_sequences)
        label = f"{prefix} ({name} split)"
        if config.is_packed:
            return packed_maps.build_packed_dataset_maps(
                info.sequence_lengths, documents, request,
                config.seq_length + int(config.add_extra_token_to_sequence), config.seed,
                config.packing_window, name=label, overflow=config.packing_overflow,
            )
        if split.kind == "staged":
            return staged_split.dataset_epochs(
                config, prefix, info, documents, max_lengths[prefix], request
            )
        maps = None if provider is None else provider.gpt_maps(
            DatasetMapsRequest(
                prefix, name, request, config.seq_length, config.seed, split.bookend, documents,
                info.sequence_lengths, config.add_extra_token_to_sequence,
                split.drop_last_partial,
            )
        )
        if maps is None:
            maps = gpt.build_gpt_index_maps(
                info.sequence_lengths, documents, request, config.seq_length, config.seed,
                config.add_extra_token_to_sequence, split.drop_last_partial, name=label,
                max_sequence_length=max_lengths[prefix],
            )
        return maps, (maps.sample_index.dtype.str, maps.shuffle_index.dtype.str), 1

    import tqdm  # only where maps are built: a cached start does not load it

    built = [
        build(p, r)
        for p, r in tqdm.tqdm(
            zip(split.prefixes, requests, strict=True), total=len(requests),
            desc=f"index maps ({name}, {split.kind})", disable=len(requests) < 16, leave=False,
        )
    ]
    position = {p: k for k, p in enumerate(spec.prefixes)}
    constituent = [position[p] for p in split.prefixes]
    if split.kind == "staged":
        out = {
            f"{name}.dataset_index": dataset_index,
            f"{name}.dataset_sample_index": dataset_sample_index,
        }
    elif split.kind != "single":
        out = _blend_arrays(split, [len(m) if config.is_packed else len(m[0]) for m in built])
    else:
        out = {}
    meta: dict[str, Any] = {"prefixes": constituent}
    if config.is_packed:
        out.update(packed_maps.concatenated_arrays(name, built, constituent))
        meta.update(
            megatron_dtypes=[],
            blended=split.kind != "single",
            packed=True,
            split_documents=[m.split_documents for m in built],
        )
        return out, meta
    maps, dtypes, epochs = zip(*built)
    out.update(_concatenated_maps(name, maps, constituent))
    meta.update(megatron_dtypes=[list(d) for d in dtypes], blended=split.kind != "single")
    if split.kind == "staged":
        out[f"{name}.epochs"] = np.array(epochs, dtype=np.int64)
        meta["staged"] = True
    return out, meta


def _blend_arrays(spec: split_resolution.SplitSpec, lengths: list[int]) -> dict[str, np.ndarray]:
    """A blended split's `dataset_index` and `dataset_sample_index` over datasets of `lengths`
    samples.

    Raises:
      ValueError: an unweighted blend over a dataset without samples, or a blend drawing more
        samples from a dataset than it has.
    """
    if spec.kind == "weighted":
        dataset_index, dataset_sample_index = blend_index.build_blending_indices(
            blend_spec.normalize(spec.weights), sum(spec.blend_targets())
        )
    else:
        for prefix, n in zip(spec.prefixes, lengths):
            if n == 0:
                raise ValueError(
                    f"dataset {prefix!r} has no samples in the {spec.name} split; an "
                    "unweighted blend weights datasets by their lengths, which must be > 0"
                )
        if spec.num_samples is not None:
            dataset_index, dataset_sample_index = blend_index.build_blending_indices(
                blend_spec.normalize(lengths), min(spec.num_samples, sum(lengths))
            )
        else:
            dataset_index, dataset_sample_index = blend_index.build_exhaustive_blending_indices(
                lengths
            )
    drawn = np.bincount(dataset_index, minlength=len(lengths))
    for j, (prefix, n) in enumerate(zip(spec.prefixes, lengths)):
        if drawn[j] > n:
            raise ValueError(
                f"the {spec.name} blend draws {drawn[j]} samples from dataset {j} ({prefix!r}) "
                f"which has only {n}; increase mid_level_dataset_surplus (now {spec.surplus})"
            )
    return {
        f"{spec.name}.dataset_index": dataset_index,
        f"{spec.name}.dataset_sample_index": dataset_sample_index,
    }



def _concatenated_maps(
    name: str, maps: list[gpt.GPTIndexMaps], constituent_prefix: list[int]
) -> dict[str, np.ndarray]:
    """The datasets' GPT maps end to end, with `offsets[j] = (document, sample, shuffle starts of
    dataset j, its sample count)` (the sample count is the length of its shuffle index, all of a
    staged dataset's epochs) and each dataset's position among the plan's prefixes."""
    sizes = np.array(
        [[len(m.document_index), len(m.sample_index), len(m.shuffle_index)] for m in maps],
        dtype=np.int64,
    ).reshape(-1, 3)
    offsets = np.zeros((len(maps), 4), dtype=np.int64)
    offsets[1:, :3] = np.cumsum(sizes[:-1], axis=0)
    offsets[:, 3] = sizes[:, 2]
    sample_dtype = np.result_type(*[m.sample_index.dtype for m in maps])
    shuffle_dtype = np.result_type(*[m.shuffle_index.dtype for m in maps])
    return {
        f"{name}.document_index": np.concatenate([m.document_index for m in maps]),
        f"{name}.sample_index": np.concatenate(
            [m.sample_index.astype(sample_dtype, copy=False) for m in maps]
        ).reshape(-1, 2),
        f"{name}.shuffle_index": np.concatenate(
            [m.shuffle_index.astype(shuffle_dtype, copy=False) for m in maps]
        ),
        f"{name}.offsets": offsets,
        f"{name}.constituent_prefix": np.array(constituent_prefix, dtype=np.int64),
    }

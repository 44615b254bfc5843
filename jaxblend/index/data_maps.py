"""The dataset-level entry point: a `GPTDataConfig` + dataset facts -> every split's index maps.

`build_data_maps` reproduces Megatron-Core's `BlendedMegatronDatasetBuilder` decisions for GPT
data and caches the result. Which datasets each split blends, and how many samples it asks of
each, is decided in `split_resolution` (shared with `estimate`):

* `blend` + `split`: one split matrix for every prefix. A single prefix without weights is a plain
  GPT dataset per split; otherwise every split is a blend of one GPT dataset per prefix.
* `blend_per_split`: each split names its own blend and uses each prefix whole. A single prefix is
  a plain GPT dataset (its weight is ignored, as in Megatron).
* Weighted blends of N samples ask dataset j for `ceil(ceil(N w_j) (1 + surplus))` samples and
  have size `sum_j ceil(N w_j)` (Megatron quirk: may exceed N by float rounding); the blend
  normalizes the (already normalized) weights once more, as Megatron does.
* Unweighted blends weight datasets by their lengths (one epoch each): size `min(N, total)`, or
  the exhaustive variant when N is None.
* A split with no tokens and no requested count is empty (Megatron's behaviour); requesting
  samples from it raises ValueError (Megatron loops forever).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tqdm
from absl import logging

from jaxblend.index import (
    blend_index,
    blend_spec,
    bucket_cache,
    cache,
    gpt,
    megatron_cache,
    split_resolution,
)
from jaxblend.index import split as split_lib
from jaxblend.index.config import DatasetInfo, GPTDataConfig
from jaxblend.index.split_maps import SplitMaps

PLAN_FORMAT = "gpt-plan-1"

InfoSource = split_resolution.InfoSource


def plan_fingerprint(
    config: GPTDataConfig, prefixes: list[str], infos: dict[str, DatasetInfo]
) -> str:
    """The plan's identity (its cache key): every setting that changes the maps, the index code
    and the datasets' content fingerprints (never their paths; docs/format.md, "Fingerprint")."""
    position = {p: k for k, p in enumerate(prefixes)}

    def encode(raw: Any) -> Any:
        if raw is None:
            return None
        b = blend_spec.parse_blend(raw)
        return {
            "datasets": [position[p] for p in b.prefixes],
            "weights": None if b.weights is None else [repr(float(w)) for w in b.weights],
        }

    payload = {
        "format": PLAN_FORMAT,
        "index_cache_format": cache.FORMAT_VERSION,
        "index_code": cache.code_digest(),
        "blend": encode(config.blend),
        "blend_per_split": None
        if config.blend_per_split is None
        else [encode(b) for b in config.blend_per_split],
        "split": config.split if config.blend is not None else None,
        "seq_length": int(config.seq_length),
        "seed": int(config.seed),
        "num_samples": list(config.num_samples),
        "add_extra_token_to_sequence": bool(config.add_extra_token_to_sequence),
        "drop_last_partial_validation_sequence": bool(config.drop_last_partial_validation_sequence),
        "mid_level_dataset_surplus": repr(float(config.mid_level_dataset_surplus)),
        "datasets": [infos[p].fingerprint for p in prefixes],
    }
    return cache.fingerprint(payload)


class DataMaps:
    """Every split of a data configuration, built or loaded from the cache.

    Attributes:
      config: the `GPTDataConfig`.
      prefixes: the distinct dataset prefixes, in order of first appearance.
      fingerprint: stable identity of config + dataset contents (cache key, resume check).
      cache_path: the cache entry directory, or None.
    """

    def __init__(
        self,
        config: GPTDataConfig,
        prefixes: tuple[str, ...],
        fingerprint: str,
        splits: dict[str, SplitMaps | None],
        cache_path: str | None,
        built: tuple[str, ...] = split_lib.SPLIT_NAMES,
    ) -> None:
        self.config = config
        self.prefixes = prefixes
        self.fingerprint = fingerprint
        self._splits = splits
        self.cache_path = cache_path
        self.built = built

    def split(self, name: str) -> SplitMaps | None:
        """The plan of split "train", "valid" or "test", or None if the split does not exist.

        Raises:
          ValueError: an unknown name, or a split this plan was not asked to build.
        """
        if name not in split_lib.SPLIT_NAMES:
            raise ValueError(f"split name {name!r}; expected one of {split_lib.SPLIT_NAMES}")
        if name not in self.built:
            raise ValueError(f"the {name} split was not built (this plan holds {self.built})")
        return self._splits[name]

    def __repr__(self) -> str:
        sizes = {k: (None if v is None else len(v)) for k, v in self._splits.items()}
        return f"DataMaps(fingerprint={self.fingerprint!r}, prefixes={len(self.prefixes)}, splits={sizes})"


def config_prefixes(config: GPTDataConfig) -> list[str]:
    """Every distinct prefix a configuration names, in order of first appearance."""
    if config.blend is not None:
        return blend_spec.blend_prefixes([config.blend])
    return blend_spec.blend_prefixes(config.blend_per_split)


def _wanted_splits(splits: Sequence[str] | None) -> tuple[str, ...]:
    if splits is None:
        return split_lib.SPLIT_NAMES
    unknown = [s for s in splits if s not in split_lib.SPLIT_NAMES]
    if unknown or not splits:
        raise ValueError(f"splits {list(splits)}: expected a non-empty subset of {split_lib.SPLIT_NAMES}")
    return tuple(s for s in split_lib.SPLIT_NAMES if s in splits)


def cache_entries(key: str, splits: Sequence[str] | None = None) -> list[str]:
    """The cache entries that can serve `splits` of plan `key`, best first (whole plan first)."""
    wanted = _wanted_splits(splits)
    if wanted == split_lib.SPLIT_NAMES:
        return [key]
    return [key, f"{key}-{'-'.join(wanted)}"]


def build_data_maps(
    config: GPTDataConfig,
    infos: InfoSource,
    splits: Sequence[str] | None = None,
    *,
    verify: str = "summary",
) -> DataMaps:
    """Builds (or loads from `config.cache_dir`) the index maps of every split, or of `splits`.

    Each split's maps depend only on its own settings, so building a subset gives the same maps
    (and the same plan fingerprint) as building everything; a subset only skips the others (and
    their checks, e.g. a weighted blend's sample count). A cached entry of every split serves a
    subset; a subset is cached under its own key.

    Args:
      config: the data configuration.
      infos: prefix -> DatasetInfo, as a mapping or a callable.
      splits: the split names to build (default: all).
      verify: how a cached entry is checked before use: "summary" (cheap, every start) or
        "full" (every byte against its SHA-256; see `jaxblend.index.cache`).

    Returns:
      The `DataMaps`.

    Raises:
      ValueError: missing dataset info, a dataset without tokens, samples requested from an empty
        split, a blend that oversamples a dataset, or counts overflowing the index dtypes.
    """
    wanted = _wanted_splits(splits)
    specs = split_resolution.resolve_splits(config, wanted)
    prefixes = config_prefixes(config)
    if not prefixes:
        raise ValueError("the configuration has no non-empty split")
    info_by_prefix = {p: split_resolution.dataset_info(infos, p) for p in prefixes}
    key = plan_fingerprint(config, prefixes, info_by_prefix)
    entries = cache_entries(key, wanted)
    entry = entries[-1]

    # A bucket cache is used through a local mirror (see `bucket_cache`).
    remote = bucket_cache.is_url(config.cache_dir)
    cache_dir = bucket_cache.mirror_dir(config.cache_dir) if remote else config.cache_dir
    if cache_dir:
        if remote:
            for name in entries:
                if bucket_cache.fetch(config.cache_dir, name, cache_dir):
                    break
            else:
                if not bucket_cache.is_builder():
                    bucket_cache.wait_for(config.cache_dir, entry, cache_dir)
        cached = _load_cached(config, cache_dir, entries, verify, prefixes, wanted)
        if cached is not None:
            return DataMaps(config, tuple(prefixes), key, cached[0], cached[1], wanted)
    # Megatron-Core's own cache is a local directory; a bucket cache holds only jaxblend's entries.
    megatron = megatron_cache.MegatronCache(cache_dir) if cache_dir and not remote else None
    arrays, meta = _build_arrays(config, specs, prefixes, info_by_prefix, megatron or None)
    path = None
    if cache_dir:
        path = cache.save(cache_dir, entry, arrays, meta)
        if remote:
            bucket_cache.publish(config.cache_dir, entry, cache_dir)
        reloaded = cache.load(cache_dir, entry)
        if reloaded is not None:
            arrays, meta = reloaded
    summary = {s.name: len(arrays.get(f"{s.name}.dataset_index", ())) for s in specs if s}
    logging.info("built index maps %s for %d datasets (blend sizes %s)", entry, len(prefixes), summary)
    return DataMaps(
        config, tuple(prefixes), key, _make_split_plans(config, arrays, meta, prefixes, wanted), path,
        wanted,
    )


def _load_cached(
    config: GPTDataConfig,
    cache_dir: str,
    entries: list[str],
    verify: str,
    prefixes: list[str],
    wanted: tuple[str, ...],
) -> tuple[dict[str, SplitMaps | None], str] | None:
    """The split plans and entry path of the first usable cache entry of `entries`, or None."""
    for name in entries:
        loaded = cache.load(cache_dir, name, verify)
        if loaded is None:
            continue
        try:
            plans = _make_split_plans(config, *loaded, prefixes, wanted)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            # Checksummed but not what this code wrote (e.g. a hand-edited manifest): rebuild.
            path = cache.entry_path(cache_dir, name)
            logging.warning("index cache entry %s is unusable (%r); rebuilding it", path, err)
            cache.discard(cache_dir, name)
            continue
        return plans, cache.entry_path(cache_dir, name)
    return None


def _make_split_plans(
    config: GPTDataConfig,
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    prefixes: list[str],
    wanted: tuple[str, ...],
) -> dict[str, SplitMaps | None]:
    plans: dict[str, SplitMaps | None] = {}
    for name in wanted:
        split_meta = meta["splits"].get(name)
        if split_meta is None:
            plans[name] = None
            continue
        split_arrays = {
            field: arrays[f"{name}.{field}"]
            for field in (
                "document_index",
                "sample_index",
                "shuffle_index",
                "offsets",
                "constituent_prefix",
                "dataset_index",
                "dataset_sample_index",
            )
            if f"{name}.{field}" in arrays
        }
        plans[name] = SplitMaps(
            name=name,
            dataset_names=tuple(prefixes[p] for p in split_meta["prefixes"]),
            arrays=split_arrays,
            lengths=arrays["lengths"],
            length_offsets=arrays["length_offsets"],
            seq_length=config.seq_length,
            add_extra_token=config.add_extra_token_to_sequence,
            megatron_dtypes=[tuple(d) for d in split_meta["megatron_dtypes"]],
        )
    return plans


def _build_arrays(
    config: GPTDataConfig,
    specs: list[split_resolution.SplitSpec | None],
    prefixes: list[str],
    infos: dict[str, DatasetInfo],
    megatron: megatron_cache.MegatronCache | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    for p in prefixes:
        split_resolution.check_has_tokens(p, infos[p])
    position = {p: k for k, p in enumerate(prefixes)}
    max_lengths = {p: int(infos[p].sequence_lengths.max()) for p in prefixes}
    length_offsets = np.zeros(len(prefixes) + 1, dtype=np.int64)
    length_offsets[1:] = np.cumsum([infos[p].num_sequences for p in prefixes])
    arrays: dict[str, np.ndarray] = {
        "lengths": np.concatenate([infos[p].sequence_lengths for p in prefixes]).astype(np.int32),
        "length_offsets": length_offsets,
    }
    meta: dict[str, Any] = {"prefixes": prefixes, "splits": {}}
    for spec in specs:
        if spec is None:
            continue
        arrays.update(
            _build_split(config, spec, infos, max_lengths, position, meta["splits"], megatron)
        )
    return arrays, meta


def _build_split(
    config: GPTDataConfig,
    spec: split_resolution.SplitSpec,
    infos: dict[str, DatasetInfo],
    max_lengths: dict[str, int],
    position: dict[str, int],
    meta_out: dict[str, Any],
    megatron: megatron_cache.MegatronCache | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of one split (named `<split>.<array>`); records its metadata in `meta_out`."""
    maps = _dataset_maps(config, spec, infos, max_lengths, megatron)
    out = _blend_arrays(spec, [len(m) for m in maps]) if spec.kind != "single" else {}
    out.update(_concatenated_maps(spec, maps, position))
    meta_out[spec.name] = {
        "prefixes": [position[p] for p in spec.prefixes],
        "megatron_dtypes": [[m.sample_index.dtype.str, m.shuffle_index.dtype.str] for m in maps],
        "blended": spec.kind != "single",
    }
    return out


def _dataset_maps(
    config: GPTDataConfig,
    spec: split_resolution.SplitSpec,
    infos: dict[str, DatasetInfo],
    max_lengths: dict[str, int],
    megatron: megatron_cache.MegatronCache | None,
) -> list[gpt.GPTIndexMaps]:
    """The GPT maps of every dataset of the split: from Megatron's cache if it holds them, else
    built."""
    maps: list[gpt.GPTIndexMaps] = []
    progress = tqdm.tqdm(
        total=len(spec.prefixes),
        desc=f"index maps ({spec.name})",
        disable=len(spec.prefixes) < 16,
        leave=False,
    )
    for prefix, request in zip(spec.prefixes, spec.dataset_requests(), strict=True):
        info = infos[prefix]
        documents = split_lib.split_indices(spec.bookend, info.num_sequences)
        found = None
        if megatron is not None:
            found = _megatron_maps(config, spec, prefix, request, documents, info, megatron)
        if found is None:
            found = gpt.build_gpt_index_maps(
                info.sequence_lengths,
                documents,
                request,
                config.seq_length,
                config.seed,
                config.add_extra_token_to_sequence,
                spec.drop_last_partial,
                name=f"{prefix} ({spec.name} split)",
                max_sequence_length=max_lengths[prefix],
            )
        maps.append(found)
        progress.update(1)
    progress.close()
    return maps


def _megatron_maps(
    config: GPTDataConfig,
    spec: split_resolution.SplitSpec,
    prefix: str,
    request: int | None,
    documents: np.ndarray,
    info: DatasetInfo,
    megatron: megatron_cache.MegatronCache,
) -> gpt.GPTIndexMaps | None:
    """One dataset's maps from Megatron-Core's own cache, or None (with a warning if unusable)."""
    found, why = megatron.load_gpt_maps(
        megatron_cache.Request(
            prefix, spec.name, request, config.seq_length, config.seed, spec.bookend,
            documents, info.sequence_lengths, config.add_extra_token_to_sequence,
            spec.drop_last_partial,
        )
    )
    if why:
        logging.warning("%s; building them instead", why)
    if found is not None:
        logging.info("using Megatron's cached %s maps of %s", spec.name, prefix)
    return found


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
    spec: split_resolution.SplitSpec, maps: list[gpt.GPTIndexMaps], position: dict[str, int]
) -> dict[str, np.ndarray]:
    """The datasets' maps end to end, with `offsets[j] = (document, sample, shuffle starts of
    dataset j, its sample count)` and each dataset's position among the plan's prefixes."""
    sample_dtype = np.result_type(*[m.sample_index.dtype for m in maps])
    shuffle_dtype = np.result_type(*[m.shuffle_index.dtype for m in maps])
    offsets = np.zeros((len(maps), 4), dtype=np.int64)
    doc_total = sample_total = shuffle_total = 0
    for j, m in enumerate(maps):
        offsets[j] = (doc_total, sample_total, shuffle_total, len(m))
        doc_total += len(m.document_index)
        sample_total += len(m.sample_index)
        shuffle_total += len(m.shuffle_index)
    name = spec.name
    return {
        f"{name}.document_index": np.concatenate([m.document_index for m in maps]),
        f"{name}.sample_index": np.concatenate(
            [m.sample_index.astype(sample_dtype, copy=False) for m in maps]
        ).reshape(-1, 2),
        f"{name}.shuffle_index": np.concatenate(
            [m.shuffle_index.astype(shuffle_dtype, copy=False) for m in maps]
        ),
        f"{name}.offsets": offsets,
        f"{name}.constituent_prefix": np.array(
            [position[p] for p in spec.prefixes], dtype=np.int64
        ),
    }

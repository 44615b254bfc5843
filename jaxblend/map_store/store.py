"""One map store for every kind of index map: load a cached entry, or build, save and publish it.

`MapStore(access)` is where `DataAccess.maps` says maps are cached:

* no `location`: maps are built in memory at every start;
* a local directory: entries are saved there (`entries`: atomic, checksummed) and Megatron-Core's
  own cache files found there are reused during a build (`megatron`, unless
  `read_megatron_cache=False`);
* a bucket URL: entries are read from a local mirror; one process (`bucket.is_builder`) builds and
  publishes a missing entry with a commit marker, the others wait for it (bounded by
  `wait_seconds`, then an error naming the entry and `--data_cache_wait`) and download it.

`load_or_build_data_maps` (GPT) and `load_or_build_masked_index` (BERT/T5) compose the pure index
layer (keys, arrays, `DataMaps`/`MaskedSampleIndex` from arrays) with this store. A subset of splits
is served from a whole-plan entry when one exists; an entry that loads but is not what the index
code writes is discarded with a warning and rebuilt.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from absl import logging

from jaxblend import opening
from jaxblend.access import DataAccess
from jaxblend.index import data_maps, masked_maps
from jaxblend.index.config import DatasetInfo, GPTDataConfig
from jaxblend.index.split import SPLIT_NAMES
from jaxblend.index.split_resolution import SplitSpec
from jaxblend.map_store import bucket, entries, megatron
from jaxblend.storage.reader import IndexedDataset
from jaxblend.urls import is_url, local_path
from jaxblend.validation import require_choice

T = TypeVar("T")
Arrays = tuple[dict[str, np.ndarray], dict[str, Any]]
# What a loaded entry that is not what the index code writes raises while being turned into maps.
_UNUSABLE = (KeyError, TypeError, ValueError, IndexError, AttributeError)


class MapStore:
    """The map store `access.maps` describes (see the module docstring).

    Attributes:
      access: how data (and the store) is reached.
      url: the bucket URL, or None for a local (or no) store.
      local_dir: the directory entries are read from (the store itself, or the bucket's mirror),
        or None without a store.
    """

    def __init__(self, access: DataAccess) -> None:
        self.access = access
        location = access.maps.location
        self.url = location if is_url(location) else None
        if self.url is not None:
            self.local_dir: str | None = bucket.mirror_dir(self.url, access.maps)
        else:
            self.local_dir = None if location is None else local_path(location)
        self._bucket: bucket.Bucket | None = None

    @property
    def enabled(self) -> bool:
        """Whether maps are cached at all."""
        return self.local_dir is not None

    def remote(self) -> bucket.Bucket:
        """The bucket of a bucket store (opened once)."""
        assert self.url is not None
        if self._bucket is None:
            self._bucket = bucket.Bucket(self.url, self.access.object_store)
        return self._bucket

    def where(self, key: str) -> str:
        """The path or URL of entry `key`."""
        if self.url is not None:
            return bucket.entry_url(self.url, key)
        assert self.local_dir is not None
        return entries.entry_path(self.local_dir, key)

    def provider(self) -> megatron.MegatronCache | None:
        """Megatron-Core's cache in a local store, when it has GPT entries and reading it is on."""
        if self.url is not None or self.local_dir is None or not self.access.maps.read_megatron_cache:
            return None
        found = megatron.MegatronCache(self.local_dir)
        return found if found else None

    def load_or_build(
        self,
        names: Sequence[str],
        build: Callable[[], Arrays],
        use: Callable[[dict[str, np.ndarray], dict[str, Any], str | None], T],
    ) -> T:
        """The first usable entry of `names` (best first) through `use`, else `build()` saved as
        `names[-1]` (and published to a bucket), reloaded memory-mapped, through `use`.

        Args:
          names: entry names that can serve the request, best first.
          build: builds the arrays and JSON metadata.
          use: turns arrays, metadata and the entry directory (None: not cached) into the result;
            raises one of `KeyError, TypeError, ValueError, IndexError, AttributeError` for an
            entry that is not what the index code writes (it is discarded and rebuilt).

        Raises:
          TimeoutError: a bucket store's builder did not publish within `wait_seconds`.
          ObjectStoreError: the bucket failed or timed out.
        """
        entry = names[-1]
        verify = self.access.maps.verify
        if self.local_dir is not None:
            if self.url is not None:
                remote = self.remote()
                if not any(remote.fetch(name, self.local_dir) for name in names) and not (
                    bucket.is_builder(self.access.maps)
                ):
                    remote.wait_for(entry, self.local_dir, self.access.maps)
            for name in names:
                loaded = entries.load(self.local_dir, name, verify)
                if loaded is None:
                    continue
                path = entries.entry_path(self.local_dir, name)
                try:
                    return use(*loaded, path)
                except _UNUSABLE as err:
                    logging.warning("index cache entry %s is unusable (%r); rebuilding it", path, err)
                    entries.discard(self.local_dir, name)
        arrays, meta = build()
        if self.local_dir is None:
            return use(arrays, meta, None)
        path = entries.save(self.local_dir, entry, arrays, meta)
        if self.url is not None:
            self.remote().publish(entry, self.local_dir)
        reloaded = entries.load(self.local_dir, entry, verify)  # memory-mapped, as later starts see it
        if reloaded is not None:
            arrays, meta = reloaded
        return use(arrays, meta, path)


def load_or_build_data_maps(
    config: GPTDataConfig,
    infos: data_maps.InfoSource,
    access: DataAccess | None = None,
    splits: Sequence[str] | None = None,
) -> data_maps.DataMaps:
    """The GPT index maps of `config` (every split, or `splits`), from the map store of
    `access.maps` or built (and saved there).

    A cached entry of every split serves a subset; a subset is cached under its own key. Each
    split's maps depend only on its own settings, so a subset has the same maps and fingerprint.

    Args:
      config: the data configuration.
      infos: prefix -> DatasetInfo, as a mapping or a callable.
      access: where maps are cached and how the store is reached (default:
        `DataAccess.from_env()`, evaluated once here).
      splits: the split names to build (default: all).

    Raises:
      ValueError: as `jaxblend.index.build_data_maps`.
      TimeoutError: a bucket store's builder did not publish within `access.maps.wait_seconds`.
    """
    store = MapStore(DataAccess.from_env() if access is None else access)
    spec = data_maps.DataMapsSpec.resolve(config, infos, splits)
    return store.load_or_build(
        spec.entries,
        lambda: data_maps.build_arrays(spec, store.provider()),
        lambda arrays, meta, path: data_maps.data_maps_from_arrays(spec, arrays, meta, path),
    )


def open_and_load_data_maps(
    config: GPTDataConfig, access: DataAccess, splits: Sequence[str] | None = None
) -> tuple[dict[str, IndexedDataset], data_maps.DataMaps]:
    """The datasets `config` names (`opening.open_config_datasets`: once each, concurrently) and
    their maps (`load_or_build_data_maps`)."""
    datasets, infos = opening.open_config_datasets(config, access)
    return datasets, load_or_build_data_maps(config, infos, access, splits)


@dataclasses.dataclass(frozen=True)
class EntryRows:
    """Picklable recipe of a cached masked index's rows (reloaded memory-mapped in workers)."""

    local_dir: str
    key: str
    split: str

    def __call__(self) -> np.ndarray:
        loaded = entries.load(self.local_dir, self.key, "summary")
        try:
            if loaded is None:
                raise ValueError("missing")
            return masked_maps.masked_index_from_arrays(*loaded, self.key, self.split).rows
        except ValueError:
            raise ValueError(
                f"masked sample index entry {entries.entry_path(self.local_dir, self.key)} vanished "
                "or is corrupt in this process; rebuild it by constructing the source again"
            ) from None


def load_or_build_masked_index(
    config: masked_maps.MaskedIndexConfig,
    info: DatasetInfo,
    split: str,
    access: DataAccess | None = None,
) -> masked_maps.MaskedSampleIndex:
    """The BERT/T5 sample index of one split, from the map store of `access.maps` or built (and
    saved there), exactly as GPT maps are (local directory or bucket).

    Args:
      config: the index configuration.
      info: the dataset's sequence lengths, document boundaries and content fingerprint.
      split: "train", "valid" or "test".
      access: where maps are cached (default: `DataAccess.from_env()`, evaluated once here).

    Raises:
      ValueError: as `jaxblend.index.build_masked_index`.
      TimeoutError: a bucket store's builder did not publish within `access.maps.wait_seconds`.
    """
    store = MapStore(DataAccess.from_env() if access is None else access)
    require_choice("split", split, SPLIT_NAMES)
    key = masked_maps.masked_index_key(config, info, split)

    def use(arrays: dict[str, np.ndarray], meta: dict[str, Any], path: str | None):
        reopen = None if path is None else EntryRows(os.path.dirname(path), key, split)
        return masked_maps.masked_index_from_arrays(arrays, meta, key, split, path, reopen)

    def build() -> Arrays:
        arrays, meta = masked_maps.masked_index_arrays(config, info, split)
        logging.info(
            "built masked sample index %s (%d samples of %s)", key, len(arrays[masked_maps.ROWS]),
            info.name,
        )
        return arrays, meta

    return store.load_or_build([key], build, use)


@dataclasses.dataclass(frozen=True)
class CacheStatus:
    """Whether a data configuration's maps are in the map store.

    Attributes:
      where: the entry path(s) or URL(s), or None without a store.
      cached: whether every split is cached intact (whole plan, or each split on its own).
      problems: corrupt entries found (they will be rebuilt).
    """

    where: str | None
    cached: bool
    problems: list[str]


def data_maps_status(
    key: str, specs: Sequence[SplitSpec | None], access: DataAccess | None = None
) -> CacheStatus:
    """Whether the maps of plan `key` (resolved splits `specs`, e.g. from
    `jaxblend.index.estimate.estimate_plan`) are cached, every byte checked against its manifest.

    Cached means the whole plan, or each existing split on its own (as single-split tools build).
    """
    store = MapStore(DataAccess.from_env() if access is None else access)
    if not store.enabled:
        return CacheStatus(None, False, [])
    assert store.local_dir is not None

    def found(names: list[str]) -> str | None:
        if store.url is not None:
            return next((n for n in names if store.remote().committed(n)), None)
        manifests = (os.path.join(store.local_dir, n, entries.MANIFEST) for n in names)
        return next((n for n, m in zip(names, manifests) if os.path.exists(m)), None)

    names = [key] if found([key]) else [
        found(data_maps.cache_entries(key, (s.name,))) for s in specs if s is not None
    ]
    if not names or not all(names):
        return CacheStatus(store.where(key), False, [])
    names = list(dict.fromkeys(names))
    problems = []
    for name in names:  # every byte against the manifest's SHA-256
        problem = store.remote().fetch_problem(name, store.local_dir) if store.url else None
        problem = problem or entries.check_dir(entries.entry_path(store.local_dir, name), name)
        if problem is not None:
            problems.append(f"index cache entry is corrupt ({problem}); it will be rebuilt")
    return CacheStatus(", ".join(store.where(n) for n in names), not problems, problems)


"""The map store: caching of every kind of index map (GPT data maps, BERT/T5 sample indices).

Maps are cached in a local directory, at a bucket URL shared by every host (through a local
mirror, published once by one builder with a commit marker), and Megatron-Core's own cache files
are reused. Where is `DataAccess.maps` (`jaxblend.access.MapStoreOptions`). The index layer
(`jaxblend.index`) computes keys and arrays without I/O; this package saves, fetches, verifies and
publishes them:

* `load_or_build_data_maps(config, infos, access, splits=None)` -> `DataMaps`
  (`open_and_load_data_maps(config, access, splits=None)`: the datasets opened too);
* `load_or_build_masked_index(config, info, split, access)` -> `MaskedSampleIndex`;
* `data_maps_status(key, specs, access)` -> whether a plan is cached (preflight);
* `publish(config, access)` / `load_or_publish(config, access)` -> a `Publication`: a bucket
  store's published plan (row tables, a dataset table read by range, and a small head written
  last) that training hosts start from without opening any dataset.

Modules: `entries` (local entry format, manifest checksums, atomic save, verify), `bucket`
(publish/fetch/wait at a bucket URL), `megatron` (reading Megatron-Core's cache), `store` (the
composition), `record` (the publication's format: head and dataset table), `publication`
(publishing and reading it) and `dataset_table` (reading the table's lines by range, on demand). Names resolve on first use.
"""

from __future__ import annotations

from jaxblend import _lazy

_NAMES = {
    "CacheStatus": "jaxblend.map_store.store",
    "MapStore": "jaxblend.map_store.store",
    "data_maps_status": "jaxblend.map_store.store",
    "load_or_build_data_maps": "jaxblend.map_store.store",
    "load_or_build_masked_index": "jaxblend.map_store.store",
    "open_and_load_data_maps": "jaxblend.map_store.store",
    "Publication": "jaxblend.map_store.record",
    "load_or_publish": "jaxblend.map_store.publication",
    "publish": "jaxblend.map_store.publication",
}

__all__ = [
    "CacheStatus",
    "MapStore",
    "Publication",
    "data_maps_status",
    "load_or_build_data_maps",
    "load_or_build_masked_index",
    "load_or_publish",
    "open_and_load_data_maps",
    "publish",
]


__getattr__, __dir__ = _lazy.exports(__name__, _NAMES)

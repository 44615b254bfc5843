"""The `jaxblend.access.DataAccess` described by the storage and cache flags.

The flags themselves are data flags (`define_data_flags`); `--storage_backend` belongs to the
source flags (`define_source_flags`) and is "auto" for programs that do not define it.
"""

from __future__ import annotations

import dataclasses

from absl import flags

from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.cli import data_flags
from jaxblend.urls import is_url


def data_access_from_flags(default_map_location: str | None = None) -> DataAccess:
    """Where and how the data flags' data is reached.

    `--s3_endpoint`, `--s3_region`, `--storage_concurrency`, `--storage_retries` and
    `--storage_timeout` give the object-store options (over the environment's endpoint and
    region); `--data_cache_path`, `--data_cache_mirror` and `--data_cache_wait` the map store; a
    bucket `--data_cache_path` also holds the shared identity memo (`<path>/identity/`).

    Args:
      default_map_location: the map store's location when `--data_cache_path` is not given.

    Raises:
      ValueError: one line naming the bad flag.
    """
    fl = flags.FLAGS
    env = DataAccess.from_env()  # the environment's mirror and identity memo, under the flags
    location = fl.data_cache_path or default_map_location
    try:
        maps = MapStoreOptions(
            location=location,
            mirror=fl.data_cache_mirror or env.maps.mirror,
            wait_seconds=fl.data_cache_wait,
        )
    except ValueError as e:
        raise ValueError(f"--data_cache_path/--data_cache_mirror/--data_cache_wait: {e}") from None
    identity = env.identity
    if is_url(location):
        identity = dataclasses.replace(identity, shared_url=f"{location.rstrip('/')}/identity/")
    backend = fl["storage_backend"].value if "storage_backend" in fl else "auto"
    return DataAccess(
        object_store=data_flags.object_store_from_flags(), maps=maps, identity=identity,
        backend=backend,
    )

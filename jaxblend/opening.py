"""Opening datasets for the index layer: prefixes -> `IndexedDataset` and `DatasetInfo`.

The glue between storage and index maps: the index package never opens files; sources, tools and
tests use these helpers, with the `DataAccess` that says how data is reached, to hand it the
sequence lengths, document boundaries and content fingerprint of each dataset.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Sequence

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.protocols import SequenceDataset
from jaxblend.storage.reader import IndexedDataset
from jaxblend.urls import is_url


def dataset_info(dataset: SequenceDataset, name: str) -> index.DatasetInfo:
    """The index layer's view of an opened dataset (its arrays are read only if maps are built)."""
    return index.DatasetInfo(
        name,
        lambda: dataset.sequence_lengths,
        lambda: dataset.document_indices,
        dataset.fingerprint,
    )


def open_datasets(
    prefixes: Iterable[str],
    access: DataAccess | None = None,
    max_concurrency: int = 64,
) -> tuple[dict[str, IndexedDataset], dict[str, index.DatasetInfo]]:
    """Opens each distinct prefix once, many at a time; returns the datasets and their infos.

    Every dataset is opened with `access` (its backend, object-store options and identity memo;
    default `DataAccess.from_env()`, evaluated once here) and keeps it when pickled.

    Opening a bucket-hosted dataset is a few round trips of small requests (the whole `.idx` and
    the store's checksum of the `.bin` the first time a version is seen), so prefixes are opened,
    and their identities taken, concurrently on `max_concurrency` threads; errors surface for the
    first failing prefix in order.
    """
    names = list(dict.fromkeys(prefixes))
    access = DataAccess.from_env() if access is None else access

    def open_one(prefix: str) -> tuple[IndexedDataset, index.DatasetInfo]:
        dataset = IndexedDataset(prefix, access=access)
        return dataset, dataset_info(dataset, prefix)

    def open_remote(prefix: str) -> tuple[IndexedDataset, index.DatasetInfo]:
        opened = open_one(prefix)
        # The identity needs a request of its own at first sight (the store's checksum): take it
        # here, on the pool, rather than one prefix at a time when the maps' key is computed.
        _ = opened[0].fingerprint
        return opened

    # Local opens are CPU-bound (threads would only contend for the GIL); remote ones wait.
    remote = [p for p in names if is_url(p)]
    opened_by_name: dict[str, tuple[IndexedDataset, index.DatasetInfo]] = {}
    if len(remote) > 1:
        workers = min(max_concurrency, len(remote))
        with concurrent.futures.ThreadPoolExecutor(workers, "jaxblend-open") as pool:
            opened_by_name.update(zip(remote, pool.map(open_remote, remote)))
    opened = [opened_by_name.get(p) or open_one(p) for p in names]
    return {p: d for p, (d, _) in zip(names, opened)}, {p: i for p, (_, i) in zip(names, opened)}


def open_config_datasets(
    config: index.GPTDataConfig, access: DataAccess | None = None
) -> tuple[dict[str, IndexedDataset], dict[str, index.DatasetInfo]]:
    """`open_datasets` of every prefix `config` names; a missing dataset that is a weight written
    after its prefix (`/d/a 30`) says to put the weight first.

    Raises:
      IndexFormatError: a dataset is missing or malformed (with that hint when it applies).
    """
    try:
        return open_datasets(index.config_prefixes(config), access)
    except IndexFormatError as e:
        hint = index.swapped_weights_hint(config_blends(config), str(e))
        if hint:
            raise IndexFormatError(f"{e}{hint}") from None
        raise


def check_datasets_exist(
    prefixes: Iterable[str],
    access: DataAccess | None = None,
    blends: Sequence[Sequence[str] | str | None] = (),
    max_concurrency: int = 64,
) -> None:
    """Refuses the first of ``prefixes`` (in order) whose `.idx` or `.bin` does not exist, with the
    line opening it gives (`jaxblend.storage.reader.check_exists`: the likely prefix when one is
    near) and, when ``blends`` read a weight after its prefix, the fix. Costs two `stat`s per
    local dataset, two empty reads per remote one (many at a time); opens nothing.

    Raises:
      IndexFormatError: a dataset does not exist.
      ObjectStoreError: the store fails or does not answer in time.
    """
    from jaxblend.storage.reader import check_exists

    names = list(dict.fromkeys(prefixes))
    access = DataAccess.from_env() if access is None else access
    store = access.object_store

    def check(prefix: str) -> IndexFormatError | None:
        try:
            check_exists(prefix, store)
        except IndexFormatError as e:
            return e
        return None

    remote = [p for p in names if is_url(p)]
    found: dict[str, IndexFormatError | None] = {}
    if len(remote) > 1:
        workers = min(max_concurrency, len(remote))
        with concurrent.futures.ThreadPoolExecutor(workers, "jaxblend-exists") as pool:
            found.update(zip(remote, pool.map(check, remote)))
    for prefix in names:
        err = found[prefix] if prefix in found else check(prefix)
        if err is not None:
            hint = index.swapped_weights_hint(list(blends), str(err))
            raise IndexFormatError(f"{err}{hint}") from None


def config_blends(config: index.GPTDataConfig) -> list:
    """The raw blends of a configuration (for `index.swapped_weights_hint`)."""
    return [config.blend, *(config.blend_per_split or ())]

"""Opening datasets for the index layer: prefixes -> `IndexedDataset` and `DatasetInfo`.

The glue between storage and index maps: the index package never opens files; sources, tools and
tests use these helpers, with the `DataAccess` that says how data is reached, to hand it the
sequence lengths, document boundaries and content fingerprint of each dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.protocols import SequenceDataset
from jaxblend.storage.reader import IndexedDataset, check_exists
from jaxblend.urls import map_paths


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
    access = DataAccess.from_env() if access is None else access

    def open_one(prefix: str) -> tuple[IndexedDataset, index.DatasetInfo]:
        dataset = IndexedDataset(prefix, access=access)
        # The info takes the identity, a request of its own at first sight (the store's
        # checksum): on the pool, rather than one prefix at a time when the maps' key is computed.
        return dataset, dataset_info(dataset, prefix)

    opened = map_paths(open_one, prefixes, max_concurrency, "jaxblend-open")
    return {p: d for p, (d, _) in opened.items()}, {p: i for p, (_, i) in opened.items()}


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
    store = (DataAccess.from_env() if access is None else access).object_store

    def check(prefix: str) -> IndexFormatError | None:
        try:
            check_exists(prefix, store)
        except IndexFormatError as e:
            return e
        return None

    for err in map_paths(check, prefixes, max_concurrency, "jaxblend-exists").values():
        if err is not None:
            hint = index.swapped_weights_hint(list(blends), str(err))
            raise IndexFormatError(f"{err}{hint}") from None


def config_blends(config: index.GPTDataConfig) -> list:
    """The raw blends of a configuration (for `index.swapped_weights_hint`)."""
    return [config.blend, *(config.blend_per_split or ())]

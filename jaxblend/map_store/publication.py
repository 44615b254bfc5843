"""Publishing a data plan once, so that training hosts start from a small record.

With a bucket map store (`--data_cache_path=gs://...`), one job publishes and every training host
reads what it published (docs/pod.md, "Publishing maps before a run"):

* the publisher (`jaxblend.tools.build_index`, or `bucket.is_builder`: JAX process 0 of a
  training job that finds nothing published) opens the datasets, loads or builds the maps,
  saves every split's row table (`jaxblend.index.row_table`) as the entry `<plan key>-rows`
  and publishes it with its commit marker, writes the dataset table
  (`jaxblend.map_store.record`), and LAST the head in one request (atomic on GCS and S3): a
  publisher that dies before that leaves no head (or the previous one), never a half-written
  one. Rerunning it with unchanged data writes nothing. It looks for the datasets' loss masks
  once; the head records which datasets have one.
* a host (`load_or_publish`) computes the launch key from the configuration alone and reads the
  head (one request); if it is absent, the builder publishes it and the others poll for it at
  most `wait_seconds`, after checking that every `.bin` named exists (`check_bins_exist`).
  The sources built from it (`jaxblend.sources.factory`) read row-table ranges, the dataset
  table's lines by range (`jaxblend.map_store.dataset_table`) and `.bin` ranges, each checked
  against the generation recorded here; no `.idx` is opened and no `.bin` hashed.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from absl import logging

from jaxblend import tokenizer_facts
from jaxblend._pause import pause_point
from jaxblend.access import DataAccess
from jaxblend.index import row_table
from jaxblend.index.config import GPTDataConfig
from jaxblend.index.data_maps import DataMaps, config_prefixes
from jaxblend.index.split import SPLIT_NAMES
from jaxblend.map_store import bucket, dataset_table, entries, record
from jaxblend.map_store.record import (
    Publication,
    PublishedDataset,
    PublishedSplit,
    launch_key,
    record_key,
    record_url,
    rows_entry,
)
from jaxblend.map_store.store import MapStore, open_and_load_data_maps
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.storage.object_store.location import resolve
from jaxblend.storage.object_store.publishing import wait_for_publication
from jaxblend.storage.reader import IndexedDataset
from jaxblend.tokenizer_facts import TokenizerFacts
from jaxblend.urls import is_url, map_paths


def applies(access: DataAccess) -> bool:
    """Whether sources start from a publication: the map store is a bucket URL."""
    return access.maps.location is not None and is_url(access.maps.location)


@dataclasses.dataclass(frozen=True)
class Published:
    """What `publish` did.

    Attributes:
      publication: the head's content.
      url: the head's URL.
      written: whether anything was written (False: the bucket already held this head, its
        dataset table and its row tables).
      datasets: every dataset's line of the dataset table, in table order.
    """

    publication: Publication
    url: str
    written: bool
    datasets: tuple[PublishedDataset, ...] = ()


def describe_dataset(
    dataset: IndexedDataset, prefix: str, tokenizer: TokenizerFacts | None = None
) -> PublishedDataset:
    """The record's description of an opened dataset (computes its content fingerprint), with
    the tokenizer facts of its preprocessing record (None: it has none)."""
    seen = dataset.bin_dataset
    # A local file's version stamp (device, inode, ...) means nothing on another host.
    remote = dataset.is_remote and seen.generation is not None
    return PublishedDataset(
        prefix=prefix,
        dtype=seen.dtype,
        bin_size=seen.bin_size,
        generation=seen.generation.hex() if remote else "",
        fingerprint=dataset.fingerprint,
        tokenizer=None if tokenizer is None else tokenizer.to_published(),
    )


def _store(access: DataAccess) -> MapStore:
    if not applies(access):
        raise ValueError(
            f"publishing needs a bucket map store (--data_cache_path=gs://... or s3://...), got "
            f"{access.maps.location!r}"
        )
    return MapStore(access)


def publish(config: GPTDataConfig, access: DataAccess) -> Published:
    """Builds (or loads) the maps and row tables of every split of `config` and publishes them,
    the record last (see the module docstring).

    Raises:
      ValueError: not a bucket map store, or as `load_or_build_data_maps`.
      IndexFormatError: a dataset is missing or malformed.
      ObjectStoreError: the bucket failed or timed out.
    """
    return publish_plan(config, *open_and_load_data_maps(config, access), access)


def publish_plan(
    config: GPTDataConfig,
    datasets: Mapping[str, IndexedDataset],
    plan: DataMaps,
    access: DataAccess,
) -> Published:
    """`publish` of maps already loaded: `plan` (every split) of `config` over the opened
    `datasets` (prefix -> dataset).

    Raises:
      ValueError: not a bucket map store, or `plan` lacks a split.
      ObjectStoreError: the bucket failed or timed out.
    """
    store = _store(access)
    remote = store.remote()
    assert store.url is not None and store.local_dir is not None
    key = launch_key(config)
    url = record_url(store.url, key)
    rows_key = rows_entry(plan.fingerprint)
    rows_url = bucket.entry_url(store.url, rows_key)
    position = {p: k for k, p in enumerate(plan.prefixes)}
    splits = {}
    for name in SPLIT_NAMES:
        split = plan.split(name)
        if split is not None and len(split) > 0:
            ids = tuple(position[str(n)] for n in split.dataset_names)
            splits[name] = PublishedSplit(len(split), ids, rows_url)
    # Each dataset's preprocessing record, read once here so hosts need not read one per dataset.
    facts = tokenizer_facts.blend_facts(list(plan.prefixes), access, allow_mixed=True)
    described = tuple(describe_dataset(datasets[p], p, facts.get(p)) for p in plan.prefixes)
    table, table_bytes = record.encode_table(
        key, described, _masked(described, access),
        remote=any(resolve(p).local_prefix is None for p in plan.prefixes),
    )
    publication = Publication(key, plan.fingerprint, table, splits)
    body = publication.to_bytes()
    rows_there = remote.committed(rows_key)
    if rows_there and remote.read_object(record_key(key)) == body:
        logging.info("publication %s is up to date", url)
        return Published(publication, url, False, described)
    if not rows_there:
        arrays = {}
        for name in splits:
            table_arrays = row_table.build_row_table(plan.split(name))
            arrays.update(row_table.named_arrays(name, table_arrays))
        entries.save(store.local_dir, rows_key, arrays, {"plan_key": plan.fingerprint})
        remote.publish(rows_key, store.local_dir)
    remote.write_object(table.key, table_bytes)  # named by its content: never another's
    pause_point("publish-record", 0)  # tests: row and dataset tables published, head not yet
    remote.write_object(record_key(key), body)
    logging.info("published %s (plan %s)", url, plan.fingerprint)
    return Published(publication, url, True, described)


def _masked(datasets: tuple[PublishedDataset, ...], access: DataAccess) -> list[int]:
    """Positions of the datasets with a stored loss mask (one small read per bucket dataset)."""
    from jaxblend.storage import loss_mask_reader

    found = loss_mask_reader.find_loss_masks([dataset_table.to_bin_dataset(d) for d in datasets],
                                               access)
    return [] if found is None else [k for k, m in enumerate(found.masked) if m]


def published_tokenizers(
    config: GPTDataConfig, access: DataAccess
) -> dict[str, TokenizerFacts | None] | None:
    """Each dataset's tokenizer facts from the configuration's publication (None for a dataset
    without a preprocessing record), or None when nothing is published (or the store is not a
    bucket, or the publication cannot be read: the caller then reads the datasets' own records).

    One request (the head) when every dataset has the same facts, the common case; else the whole
    dataset table is read as well.
    """
    if not applies(access):
        return None
    try:
        found = read(config, access)
        if found is None:
            return None
        table = found.table
        if table.uniform:
            facts = None if not table.tokenizers else TokenizerFacts.from_published(
                table.tokenizers[0]
            )
            prefixes = table_prefixes(config, found)
            if prefixes is not None:
                return dict.fromkeys(prefixes, facts)
        described = table_reader(found, access).all()
        return {
            d.prefix: None if d.tokenizer is None else TokenizerFacts.from_published(d.tokenizer)
            for d in described
        }
    except ValueError:  # a damaged record: opening the sources reports it
        return None


def table_prefixes(config: GPTDataConfig, found: Publication) -> list[str] | None:
    """The prefixes of `found`'s dataset table in table order, known without reading it: the
    configuration's, in order of first appearance (the head is named by the configuration as
    written, `launch_key`, and its table has one line per prefix of the plan, in that order).
    None when the counts differ (a head not made from `config`: read its table instead)."""
    prefixes = config_prefixes(config)
    return prefixes if len(prefixes) == found.table.count else None


def table_reader(found: Publication, access: DataAccess) -> dataset_table.TableReader:
    """The reader of `found`'s dataset table (nothing is read until it is asked for lines)."""
    store = _store(access)
    assert store.url is not None
    return dataset_table.TableReader(store.url, found, access)


def read(config: GPTDataConfig, access: DataAccess) -> Publication | None:
    """The record of `config` if published (one request), else None.

    Raises:
      ValueError: the record is damaged or belongs to another configuration.
      ObjectStoreError: the bucket failed or timed out.
    """
    remote, key, url = _record(config, access)
    data = remote.read_object(record_key(key))
    return None if data is None else _parse(data, url, key)


def _record(config: GPTDataConfig, access: DataAccess) -> tuple[bucket.Bucket, str, str]:
    """The bucket holding `config`'s record, its launch key and its URL."""
    store = _store(access)
    key = launch_key(config)
    return store.remote(), key, record_url(store.remote().url, key)


def _parse(data: bytes, url: str, key: str) -> Publication:
    publication = Publication.from_bytes(data, url)
    if publication.launch_key != key:
        raise ValueError(
            f"publication record {url}: holds launch key {publication.launch_key}, not {key}; "
            "publish it again with python -m jaxblend.tools.build_index"
        )
    return publication


def wait_for(config: GPTDataConfig, access: DataAccess) -> Publication:
    """Polls for the record of `config` until the builder has written it.

    Raises:
      TimeoutError: not published within `access.maps.wait_seconds` (names the record's URL).
      ObjectStoreError: the bucket failed or timed out.
    """
    remote, key, url = _record(config, access)
    options = access.maps
    logging.info(
        "waiting for process 0 to publish index cache entry %s (the publication record)", url
    )
    data = wait_for_publication(
        lambda: remote.read_object(record_key(key)),
        f"publication record {url}",
        options.wait_seconds,
        options.poll_seconds,
        "the publishing process (build_index, or process 0) is slow or failed: check its log, "
        "publish first with python -m jaxblend.tools.build_index, or raise --data_cache_wait",
    )
    return _parse(data, url, key)


def load_or_publish(config: GPTDataConfig, access: DataAccess) -> Publication:
    """The record of `config`: read (one request); if absent, published by the builder
    (`bucket.is_builder`) or waited for by the others.

    Raises:
      TimeoutError: a non-builder waited `wait_seconds` in vain.
      ValueError: a damaged record, or as `publish`.
      ObjectStoreError: the bucket failed or timed out.
    """
    found = read(config, access)
    if found is not None:
        return found
    if bucket.is_builder(access.maps):
        return publish(config, access).publication
    check_bins_exist(config, access)
    return wait_for(config, access)


def check_bins_exist(config: GPTDataConfig, access: DataAccess) -> None:
    """Refuses at once a dataset of `config` whose `.bin` does not exist (one empty read per
    prefix, many in flight together; no `.idx` is touched).

    A host about to wait for a record that nothing is going to publish (it was started with other
    data flags than the builder's, e.g. a misspelt prefix) fails here with the prefix's name
    instead of at the end of the wait.

    Raises:
      IndexFormatError: a `.bin` does not exist (names it).
      ObjectStoreError: the bucket failed or timed out.
    """

    def missing(prefix: str) -> str | None:
        loc = resolve(prefix)
        if loc.local_prefix is not None:
            found = os.path.isfile(loc.local_prefix + ".bin")
        else:
            directory = ObjectDirectory(loc.kvstore, access.object_store)
            found = directory.exists(loc.bin_key, "checking it exists")
        return None if found else loc.file_name(".bin")

    for name in map_paths(missing, config_prefixes(config), 64, "jaxblend-exists").values():
        if name is not None:
            raise IndexFormatError(
                f"{name}: data file does not exist (check --data_path; every process must be "
                "given the same data flags)"
            )

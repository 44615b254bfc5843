"""Reading a publication's dataset table by byte range, only the lines a host needs.

The table (`jaxblend.map_store.record`) has one fixed-width line per dataset, so dataset i's
description is the byte range `[i x width, (i + 1) x width)`: `TableReader` reads the lines not
held yet in one round of range requests (lines less than `coalesce_gap` bytes apart in one) and
keeps them for the life of the process. `PublishedBins` is one split's view of it for the token
reader (`LazyBinDatasets`): its datasets described when a read first reaches them, its names the
configuration's prefixes when given (`publication.table_prefixes`), fingerprints read for the
datasets asked for. Both pickle as their recipe, never as the lines read (docs/pod.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from jaxblend.access import DataAccess
from jaxblend.map_store.bucket import range_bytes
from jaxblend.map_store.record import (
    REPUBLISH,
    DatasetTable,
    Publication,
    PublishedDataset,
    decode_line,
)
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.storage.token_reader import BinDataset


def merge_runs(runs: Iterable[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """`runs` `[lo, hi)` sorted, those at most `gap` apart merged (lines `d` as runs `(d, d + 1)`)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(runs):
        if merged and lo - merged[-1][1] <= gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


class TableReader:
    """The lines of one publication's dataset table, read by range on demand (thread-safe).

    Args:
      store_url: the map store's URL (the table's key is relative to it).
      publication: the head naming the table.
      access: how the bucket is reached.

    Attributes:
      requests: range requests issued so far by this process.
      bytes_read: bytes read so far by this process.
    """

    def __init__(self, store_url: str, publication: Publication, access: DataAccess) -> None:
        self.store_url = store_url.rstrip("/") + "/"
        self.publication = publication
        self.access = access
        self.requests = 0
        self.bytes_read = 0
        self._held: dict[int, PublishedDataset] = {}
        self._lock = threading.Lock()  # the held lines and counters
        self._fetching = threading.Lock()  # one round of requests at a time
        self._dir: ObjectDirectory | None = None

    def __reduce__(self) -> tuple:
        return TableReader, (self.store_url, self.publication, self.access)

    def __len__(self) -> int:
        return self.table.count

    @property
    def table(self) -> DatasetTable:
        return self.publication.table

    @property
    def url(self) -> str:
        """The table object's URL."""
        return self.store_url + self.table.key

    @property
    def held(self) -> list[int]:
        """Positions of the lines read so far, ascending."""
        with self._lock:
            return sorted(self._held)

    def get(self, positions: Sequence[int]) -> list[PublishedDataset]:
        """The datasets at table `positions` (in that order), reading the lines not held yet in
        one round of range requests (`read`)."""
        return self.read(positions)[0]

    def read(self, positions: Sequence[int]) -> tuple[list[PublishedDataset], int, int]:
        """The datasets at table `positions` (in that order), and the requests and bytes this
        call issued: the lines not held yet, in one round of range requests.

        Raises:
          IndexError: a position outside the table.
          ValueError: the table is missing, shorter than its head says, or a line is damaged
            (one line naming the table's URL and saying to publish again).
          ObjectStoreError: the bucket failed or timed out.
        """
        wanted = [int(p) for p in positions]
        bad = [p for p in wanted if not 0 <= p < self.table.count]
        if bad:
            raise IndexError(f"dataset {bad[0]} is outside the {self.table.count} of {self.url}")
        with self._lock:
            missing = [p for p in wanted if p not in self._held]
        requests = nbytes = 0
        if missing:
            with self._fetching:
                with self._lock:
                    missing = [p for p in missing if p not in self._held]
                if missing:
                    requests, nbytes = self._fetch(missing)
        with self._lock:
            return [self._held[p] for p in wanted], requests, nbytes

    def all(self) -> list[PublishedDataset]:
        """Every dataset of the table, in order (reads the lines not held yet)."""
        return self.get(range(self.table.count))

    def _directory(self) -> ObjectDirectory:
        if self._dir is None:
            self._dir = ObjectDirectory(self.store_url, self.access.object_store)
        return self._dir

    def _fetch(self, missing: list[int]) -> tuple[int, int]:
        table = self.table
        width = table.width
        directory = self._directory()
        runs = merge_runs([(p, p + 1) for p in missing], self.access.object_store.coalesce_gap // width)
        futures = [directory.start_read(table.key, slice(lo * width, hi * width)) for lo, hi in runs]
        got: dict[int, PublishedDataset] = {}
        nbytes = 0
        for (lo, hi), future in zip(runs, futures):
            data = range_bytes(directory, future, table.key, f"reading datasets [{lo}, {hi})")
            nbytes += len(data)
            if len(data) != (hi - lo) * width:
                raise ValueError(
                    f"dataset table {self.url}: missing or truncated (lines [{lo}, {hi}) of "
                    f"{table.count} could not be read); {REPUBLISH}"
                )
            for p in range(lo, hi):
                try:
                    got[p] = decode_line(
                        self.publication.launch_key, table, p, data[(p - lo) * width : (p - lo + 1) * width]
                    )
                except ValueError as err:
                    raise ValueError(f"dataset table {self.url}: {err}; {REPUBLISH}") from None
        with self._lock:
            self._held.update(got)
            self.requests += len(runs)
            self.bytes_read += nbytes
        return len(runs), nbytes


class PublishedBins:
    """One split's datasets as a lazily described sequence of `BinDataset`s (see the module
    docstring; `jaxblend.storage.token_reader.LazyBinDatasets`).

    Args:
      reader: the publication's table reader (shared by the splits of one process).
      positions: table positions of the split's datasets, in the split's order.
      names: the split's dataset prefixes in the split's order, when known without reading the
        table (the configuration's); None: `prefixes()` reads every line.

    Attributes:
      num_tokens: int64 per dataset, its tokens once described (0 before).
      itemsizes: int64 per dataset, its token size once described (0 before).
      requests: table requests this split's look-ups issued in this process.
      bytes_read: table bytes this split's look-ups read in this process.
    """

    def __init__(
        self, reader: TableReader, positions: Sequence[int], names: Sequence[str] | None = None
    ) -> None:
        self.reader = reader
        self.positions = np.asarray(positions, np.int64)
        if names is not None and len(names) != len(self.positions):
            raise ValueError(
                f"{len(names)} dataset names given for a split of {len(self.positions)} datasets"
            )
        self._names = None if names is None else [str(n) for n in names]
        self.num_tokens = np.zeros(len(self.positions), np.int64)
        self.itemsizes = np.zeros(len(self.positions), np.int64)
        self._bins: dict[int, BinDataset] = {}
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_read = 0

    def __reduce__(self) -> tuple:  # the names are not carried: a worker that asks reads them
        return PublishedBins, (self.reader, self.positions)

    def __repr__(self) -> str:
        return f"PublishedBins({self.reader.url!r}, datasets={len(self)})"

    def __len__(self) -> int:
        return len(self.positions)

    def __iter__(self):
        self.ensure(range(len(self)))
        return (self._bins[d] for d in range(len(self)))

    def __getitem__(self, d: int) -> BinDataset:
        d = int(d)
        if not 0 <= d < len(self):
            raise IndexError(f"dataset {d} of a split of {len(self)}")
        bins = self._bins.get(d)
        if bins is None:
            self.ensure([d])
            bins = self._bins[d]
        return bins

    @property
    def described(self) -> list[int]:
        """Ids (split order) of the datasets described so far, ascending."""
        with self._lock:
            return sorted(self._bins)

    @property
    def remote(self) -> bool:
        """Whether some dataset of the publication is in an object store."""
        return self.reader.table.remote

    def ensure(self, ids: Sequence[int]) -> None:
        """Describes datasets `ids` (split order) not described yet: one round of range reads.

        Raises:
          as `TableReader.get`.
        """
        with self._lock:
            missing = sorted({int(d) for d in ids} - self._bins.keys())
        if not missing:
            return
        found = self.published(missing)
        with self._lock:
            for d, published in zip(missing, found):
                if d in self._bins:
                    continue
                bins = to_bin_dataset(published)
                self.itemsizes[d] = np.dtype(bins.dtype).itemsize
                self.num_tokens[d] = bins.num_tokens
                self._bins[d] = bins

    def published(self, ids: Sequence[int]) -> list[PublishedDataset]:
        """The table's descriptions of datasets `ids` (split order)."""
        found, requests, nbytes = self.reader.read(self.positions[list(ids)].tolist())
        with self._lock:
            self.requests += requests
            self.bytes_read += nbytes
        return found

    def loss_masks(self, access: DataAccess) -> Any:
        """The split's stored loss masks as the publication records them
        (`jaxblend.storage.loss_mask_reader.LossMasks`), or None when none of its datasets has
        one: no dataset is probed, and only the masked datasets are described.
        """
        from jaxblend.loss_masks import loss_mask_prefix
        from jaxblend.storage.loss_mask_reader import LossMasks

        masked = set(self.reader.table.masked)
        ids = [d for d, p in enumerate(self.positions.tolist()) if p in masked]
        if not ids:
            return None
        masks: list[BinDataset | None] = [None] * len(self)
        for d, published in zip(ids, self.published(ids)):
            masks[d] = BinDataset(
                loss_mask_prefix(published.prefix), "|u1", to_bin_dataset(published).num_tokens
            )
        return LossMasks(masks, access)

    def prefixes(self) -> list[str]:
        """Every dataset's prefix, in split order: the names given, else read from the whole
        table on first use."""
        if self._names is not None:
            return list(self._names)
        return [d.prefix for d in self.published(range(len(self)))]

    def fingerprints(self, ids: Sequence[int] | None = None) -> dict[str, str]:
        """The content fingerprints of datasets `ids` (split order; None: every dataset) by
        prefix, reading the lines not held yet in one round."""
        wanted = range(len(self)) if ids is None else ids
        return {d.prefix: d.fingerprint for d in self.published(wanted)}


def to_bin_dataset(published: PublishedDataset) -> BinDataset:
    """What the token reader needs of a published dataset."""
    return BinDataset(
        published.prefix, published.dtype, published.bin_size,
        bytes.fromhex(published.generation) or None,
    )

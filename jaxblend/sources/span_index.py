"""Span indexes: the sample ids of a split -> the `.bin` token pieces that make those samples.

A GPT sample is a window of `seq_length (+ 1)` tokens cut across document boundaries; *which*
tokens is the span index's answer, *reading* them is the token reader's
(`jaxblend.storage.TokenReader`), and turning them into the batch schema is the source's
(`jaxblend.sources.GPTSource`). `SpanIndex` is that seam: given global sample ids it returns every
piece of every sample as (row, dataset, token offset in the dataset's `.bin`, length)
(`jaxblend.index.row_table.RowSpans`, row order then piece order, empty pieces included so that
inter-document masking sees every document boundary; a row's dataset is its first piece's), with
the split's dataset names, the `.bin` description of each dataset and their fingerprints.

Two implementations give the same pieces for the same split:

* `SplitMapsSpanIndex`: the split's whole index maps (`SplitMaps`, in memory or memory-mapped from
  the local map store) over the opened `IndexedDataset`s; `SplitMaps.spans` gives sequence
  positions and `SequenceSpans.token_offsets` turns them into `.bin` token offsets (the datasets'
  `.idx` pointers). Pickled with a re-open recipe, a Grain worker re-opens the datasets and maps.
* `RowTableSpanIndex`: a published row table (`RowTables`: local arrays or bucket range reads),
  which already holds `.bin` token offsets; no `.idx` is opened.

A new way to build samples (another sample order, packing, a different cut) plugs in here: one
more `SpanIndex`, and `open_gpt_sources` choosing it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from jaxblend.index import row_table
from jaxblend.index.split_maps import SplitMaps
from jaxblend.sources.base import PerProcess
from jaxblend.sources.row_tables import RowTables
from jaxblend.storage.object_store import location
from jaxblend.storage.reader import IndexedDataset
from jaxblend.storage.sequence_spans import SequenceSpans
from jaxblend.storage.token_reader import BinDataset, LazyBinDatasets
from jaxblend.validation import require_int

Reopener = Callable[[], tuple[Sequence[IndexedDataset], SplitMaps]]
"""Picklable callable returning a split's datasets (in its dataset order) and its `SplitMaps`."""

GROUP_GAP = 64
"""Sample ids of one call further apart than this are looked up in a row table as separate row
ranges (a loader's rows of one step are one range; rows between nearby ids cost about 40 bytes
each)."""


@runtime_checkable
class SpanIndex(Protocol):
    """Where the tokens of a split's samples are: the seam between sample order and token reads."""

    def __len__(self) -> int:
        """Number of samples of the split."""

    @property
    def dataset_names(self) -> list[str]:
        """Prefixes of the split's datasets, indexed by the pieces' `dataset`."""

    @property
    def bin_datasets(self) -> list[BinDataset]:
        """What the token reader needs of each dataset's `.bin`, in `dataset_names` order."""

    @property
    def dataset_fingerprints(self) -> dict[str, str]:
        """Content fingerprint of each dataset, by name."""

    def fingerprints_of(self, names: Sequence[str]) -> dict[str, str]:
        """Content fingerprints of the datasets `names`, by name (names the split does not hold
        are left out); only those are looked up."""

    @property
    def reads_remote(self) -> bool:
        """Whether pieces or tokens come from an object store."""

    @property
    def requests(self) -> int:
        """Object-store requests this process has issued to look pieces up."""

    @property
    def bytes_read(self) -> int:
        """Object-store bytes this process has read to look pieces up."""

    def pieces(self, sample_ids: np.ndarray) -> row_table.RowSpans:
        """Every piece of `sample_ids` (checked int64 ids, any order, repeats allowed), empty ones
        included, row order then piece order; offsets count tokens of the dataset's `.bin`."""


def _empty_pieces() -> row_table.RowSpans:
    empty = np.zeros(0, np.int64)
    return row_table.RowSpans(empty, np.zeros(0, np.int32), empty, empty)


class SplitMapsSpanIndex(PerProcess):
    """The pieces of a split from its whole index maps and its opened datasets.

    Args:
      maps: the split's `SplitMaps`.
      datasets: its datasets, in `maps.dataset_names` order.
      reopen: optional picklable `Reopener`; when given, pickling carries it instead of the
        datasets and maps (a Grain worker re-opens them, the maps memory-mapped from the cache).
    """

    requests = 0  # the maps are local (memory-mapped from the map store, or in memory)
    bytes_read = 0
    PER_PROCESS = ("_sequences",)

    def __init__(
        self, maps: SplitMaps, datasets: Sequence[IndexedDataset], *, reopen: Reopener | None = None
    ) -> None:
        if len(datasets) != maps.num_datasets:
            raise ValueError(
                f"{len(datasets)} datasets given for index maps over {maps.num_datasets} datasets"
            )
        self._maps: SplitMaps | None = maps
        self._datasets: list[IndexedDataset] | None = list(datasets)
        self._names = [str(n) for n in maps.dataset_names]
        self._length = len(maps)
        self._reopen = reopen
        if reopen is not None:  # pickled without the datasets and maps: re-opened on first use
            self.PER_PROCESS = ("_sequences", "_maps", "_datasets")
        self._lock = threading.Lock()
        self._sequences: SequenceSpans | None = None

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return f"SplitMapsSpanIndex(samples={self._length}, datasets={len(self._names)})"

    def _materialize(self) -> tuple[list[IndexedDataset], SplitMaps]:
        if self._maps is None:
            with self._lock:
                if self._maps is None:
                    datasets, maps = self._reopen()
                    self._datasets = list(datasets)
                    self._maps = maps
        return self._datasets, self._maps

    @property
    def maps(self) -> SplitMaps:
        """The split's index maps."""
        return self._materialize()[1]

    @property
    def dataset_names(self) -> list[str]:
        return list(self._names)

    @property
    def bin_datasets(self) -> list[BinDataset]:
        return [d.bin_dataset for d in self._materialize()[0]]

    @property
    def dataset_fingerprints(self) -> dict[str, str]:
        """As opened: nothing is read again."""
        datasets, _ = self._materialize()
        return {name: d.fingerprint for name, d in zip(self._names, datasets, strict=True)}

    def fingerprints_of(self, names: Sequence[str]) -> dict[str, str]:
        """As opened: nothing is read again."""
        every = self.dataset_fingerprints
        return {n: every[n] for n in names if n in every}

    @property
    def reads_remote(self) -> bool:
        return any(d.is_remote for d in self._materialize()[0])

    def pieces(self, sample_ids: np.ndarray) -> row_table.RowSpans:
        datasets, maps = self._materialize()
        spans = maps.spans(sample_ids, keep_empty=True)
        if self._sequences is None:
            with self._lock:
                if self._sequences is None:
                    self._sequences = SequenceSpans(datasets)
        offset = self._sequences.token_offsets(spans.dataset, spans.sequence, spans.offset)
        return row_table.RowSpans(spans.row, spans.dataset, offset, spans.length)


class RowTableSpanIndex:
    """The pieces of a split from its published row table (local arrays or a bucket's).

    Args:
      tables: the split's row table (`ArrayRowTables`, `BucketRowTables`).
      datasets: the split's `.bin` files as published, in dataset order; their prefixes are the
        dataset names: `BinDataset`s, or a `LazyBinDatasets` described as the rows reach them (a
        publication's dataset table, `jaxblend.map_store.dataset_table.PublishedBins`: then its
        `prefixes()` gives the names, and fingerprints are read only for the datasets asked for,
        `fingerprints_of`, or in full by `dataset_fingerprints`).
      length: number of samples of the split.
      dataset_fingerprints: content fingerprint of each dataset by prefix, as published (a
        `LazyBinDatasets` with `fingerprints()` provides them when omitted).
    """

    def __init__(
        self,
        tables: RowTables,
        datasets: Sequence[BinDataset] | LazyBinDatasets,
        length: int,
        dataset_fingerprints: Mapping[str, str] | None = None,
    ) -> None:
        require_int("RowTableSpanIndex.length", length, 0)
        self._tables = tables
        self._lazy = isinstance(datasets, LazyBinDatasets)
        self._datasets = datasets if self._lazy else list(datasets)
        self._names = None if self._lazy else [d.prefix for d in self._datasets]
        self._ids: dict[str, int] | None = None  # dataset id by name (`fingerprints_of`)
        self._length = int(length)
        self._fingerprints = None if dataset_fingerprints is None else dict(dataset_fingerprints)
        self._remote_bins = datasets.remote if self._lazy else any(
            location.resolve(d.prefix).local_prefix is None for d in self._datasets
        )

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return f"RowTableSpanIndex(samples={self._length}, datasets={len(self._datasets)})"

    @property
    def tables(self) -> RowTables:
        """The split's row table."""
        return self._tables

    @property
    def dataset_names(self) -> list[str]:
        """The datasets' prefixes (of a `LazyBinDatasets`: its `prefixes()`, on first use)."""
        if self._names is None:
            self._names = self._datasets.prefixes()
        return list(self._names)

    @property
    def bin_datasets(self) -> Sequence[BinDataset] | LazyBinDatasets:
        """A list of `BinDataset`s, or the `LazyBinDatasets` itself (shared: what one reader
        describes, every reader of this process knows)."""
        return self._datasets if self._lazy else list(self._datasets)

    @property
    def dataset_fingerprints(self) -> dict[str, str]:
        """As the publication recorded them (of a `LazyBinDatasets`: read in full on first use).

        Raises:
          ValueError: the index was built without them.
        """
        if self._fingerprints is None and self._lazy:
            self._fingerprints = self._datasets.fingerprints()
        if self._fingerprints is None:
            raise ValueError(
                f"{self!r} was built without its datasets' fingerprints; pass "
                "dataset_fingerprints= (open_gpt_sources does)"
            )
        return dict(self._fingerprints)

    def fingerprints_of(self, names: Sequence[str]) -> dict[str, str]:
        """As published; of a `LazyBinDatasets` (given no `dataset_fingerprints`), the
        descriptions of `names` alone are read (one round, kept), not the whole table."""
        if not self._lazy or self._fingerprints is not None:
            every = self.dataset_fingerprints
            return {n: every[n] for n in names if n in every}
        if self._ids is None:
            self._ids = {n: d for d, n in enumerate(self.dataset_names)}
        return self._datasets.fingerprints([self._ids[n] for n in names if n in self._ids])

    @property
    def reads_remote(self) -> bool:
        return bool(self._tables.is_remote) or self._remote_bins

    @property
    def requests(self) -> int:
        """The row table's requests, and the dataset table's (of a `PublishedBins`)."""
        return self._tables.requests + getattr(self._datasets, "requests", 0)

    @property
    def bytes_read(self) -> int:
        """The row table's bytes, and the dataset table's (of a `PublishedBins`)."""
        return self._tables.bytes_read + getattr(self._datasets, "bytes_read", 0)

    def pieces(self, sample_ids: np.ndarray) -> row_table.RowSpans:
        ids = sample_ids
        if ids.size == 0:
            return _empty_pieces()
        lo, hi = int(ids.min()), int(ids.max()) + 1
        if hi - lo - ids.size <= GROUP_GAP:  # no gap between the ids can exceed GROUP_GAP
            return row_table.spans_of_rows(lo, *self._tables.rows(lo, hi), ids)
        order = np.argsort(ids, kind="stable")
        ordered = ids[order]
        cuts = np.flatnonzero(np.diff(ordered) > GROUP_GAP) + 1
        groups = np.split(np.arange(ids.size), cuts)
        if len(groups) == 1:
            return row_table.spans_of_rows(lo, *self._tables.rows(lo, hi), ids)
        parts = []
        for g in groups:
            pos = order[g]
            lo, hi = int(ordered[g[0]]), int(ordered[g[-1]]) + 1
            s = row_table.spans_of_rows(lo, *self._tables.rows(lo, hi), ids[pos])
            parts.append(row_table.RowSpans(pos[s.row], s.dataset, s.offset, s.length))
        row = np.concatenate([p.row for p in parts])
        by_row = np.argsort(row, kind="stable")
        return row_table.RowSpans(
            row[by_row], *(np.concatenate([getattr(p, f) for p in parts])[by_row]
                           for f in ("dataset", "offset", "length"))
        )

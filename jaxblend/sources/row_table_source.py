"""A GPT source over row tables: a host reads the rows of its steps and the `.bin` bytes they name.

`PlannedSource` needs a split's whole index maps and every touched dataset's `.idx` before its
first batch. `RowTableSource` needs neither: a split's row table (`jaxblend.index.row_table`)
says, for samples `[lo, hi)`, which `.bin` token ranges make them, and a `BinRanges` reader fetches
those ranges from the datasets they touch. Its batches are byte for byte `PlannedSource`'s for the
same files, configuration and schema options, and so is its `fingerprint`.

Row tables come through the `RowTables` protocol (`jaxblend.sources.row_tables`:
`ArrayRowTables` in memory or memory-mapped, `BucketRowTables` read by range from a bucket).

Pickling (Grain workers) keeps the recipe (URLs, dataset descriptions, `DataAccess`) and drops
open stores, chunk caches and threads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxblend import access as access_lib
from jaxblend.index import row_table
from jaxblend.sources import base, schema
from jaxblend.sources.planned import _destinations
from jaxblend.sources.row_tables import RowTables
from jaxblend.sources.source_identity import gpt_source_fingerprint
from jaxblend.storage.bin_ranges import BinDataset, BinRanges
from jaxblend.storage.object_store import location as _location

GROUP_GAP = 64
"""Sample ids of one call further apart than this are looked up as separate row ranges (a
loader's rows of one step are one range; rows between nearby ids cost about 40 bytes each)."""


class RowTableSource(base.BatchSource):
    """Samples of one split read through its row table (the same batches as `PlannedSource`).

    Args:
      tables: the split's row table (`ArrayRowTables`, `BucketRowTables`).
      datasets: the split's datasets, in the plan's dataset order (`BinDataset`s for the `.bin`
        reader); `dataset_names` are their prefixes.
      options: schema options.
      fingerprint: identity of the data plan (`DataMaps.fingerprint`).
      split: the split name.
      length: number of samples of the split.
      access: how the `.bin` objects are reached (default: `DataAccess.from_env()`).
    """

    def __init__(
        self,
        tables: RowTables,
        datasets: Sequence[BinDataset],
        options: schema.GPTSchemaOptions,
        *,
        fingerprint: str,
        split: str,
        length: int,
        access: access_lib.DataAccess | None = None,
        dataset_fingerprints: Mapping[str, str] | None = None,
    ):
        if isinstance(length, bool) or int(length) < 0:
            raise ValueError(f"length must be an integer >= 0, got {length!r}")
        self._tables = tables
        self._datasets = list(datasets)
        self._names = [d.prefix for d in self._datasets]
        self._fingerprints = None if dataset_fingerprints is None else dict(dataset_fingerprints)
        self._length = int(length)
        self.options = options
        self.split = split
        self.access = access if access is not None else access_lib.DataAccess.from_env()
        self._fingerprint = gpt_source_fingerprint(fingerprint, split, options)
        self._remote_bins = any(
            _location.resolve(d.prefix).local_prefix is None for d in self._datasets
        )
        self._lock = threading.Lock()
        self._reader: BinRanges | None = None

    def __getstate__(self) -> dict[str, Any]:
        from jaxblend.loading import grain_workers  # pickled for a Grain worker

        grain_workers.refuse_unguarded_main()
        state = dict(self.__dict__)
        state.pop("_lock")
        state["_reader"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(split={self.split!r}, datasets={len(self._names)}, "
            f"fingerprint={self._fingerprint!r})"
        )

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def dataset_names(self) -> list[str]:
        """Prefixes of the split's datasets, indexed by `dataset_ids`."""
        return list(self._names)

    @property
    def dataset_fingerprints(self) -> dict[str, str]:
        """Content fingerprint of each dataset, by prefix, as the publication recorded them.

        Raises:
          ValueError: the source was built without them.
        """
        if self._fingerprints is None:
            raise ValueError(
                f"{self!r} was built without its datasets' fingerprints; pass "
                "dataset_fingerprints= (open_gpt_sources does)"
            )
        return dict(self._fingerprints)

    @property
    def tables(self) -> RowTables:
        return self._tables

    @property
    def bin_reader(self) -> BinRanges:
        """This process's `.bin` range reader (built on first use)."""
        if self._reader is None:
            with self._lock:
                if self._reader is None:
                    self._reader = BinRanges(self._datasets, self.access)
        return self._reader

    @property
    def requests_issued(self) -> int:
        """Object-store requests this process has issued for this source (rows and tokens)."""
        reader = self._reader
        return self._tables.requests + (0 if reader is None else reader.requests)

    @property
    def bytes_read(self) -> int:
        """Object-store bytes this process has read for this source (rows and tokens; local
        token copies count too)."""
        reader = self._reader
        return self._tables.bytes_read + (0 if reader is None else reader.bytes_read)

    @property
    def reads_remote(self) -> bool:
        """Whether rows or tokens come from an object store."""
        return bool(self._tables.is_remote) or self._remote_bins

    # ---------------------------------------------------------------------------------- reads

    def _spans(self, ids: np.ndarray) -> row_table.RowSpans:
        """Every piece of `ids` (empty ones included), row order then piece order."""
        if ids.size == 0:
            empty = np.zeros(0, np.int64)
            return row_table.RowSpans(empty, np.zeros(0, np.int32), empty, empty)
        lo, hi = int(ids.min()), int(ids.max()) + 1
        if hi - lo - ids.size <= GROUP_GAP:  # no gap between the ids can exceed GROUP_GAP
            return row_table.spans_of_rows(lo, *self._tables.rows(lo, hi), ids, keep_empty=True)
        order = np.argsort(ids, kind="stable")
        ordered = ids[order]
        cuts = np.flatnonzero(np.diff(ordered) > GROUP_GAP) + 1
        groups = np.split(np.arange(ids.size), cuts)
        if len(groups) == 1:
            return row_table.spans_of_rows(lo, *self._tables.rows(lo, hi), ids, keep_empty=True)
        parts = []
        for g in groups:
            pos = order[g]
            lo, hi = int(ordered[g[0]]), int(ordered[g[-1]]) + 1
            s = row_table.spans_of_rows(lo, *self._tables.rows(lo, hi), ids[pos], keep_empty=True)
            parts.append(row_table.RowSpans(pos[s.row], s.dataset, s.offset, s.length))
        row = np.concatenate([p.row for p in parts])
        by_row = np.argsort(row, kind="stable")
        return row_table.RowSpans(
            row[by_row], *(np.concatenate([getattr(p, f) for p in parts])[by_row]
                           for f in ("dataset", "offset", "length"))
        )

    def _read(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, row_table.RowSpans]:
        spans = self._spans(ids)
        dest, n_valid = _destinations(spans.row, spans.length, ids.size)
        window = self.options.window_length
        text = schema.allocate_arrays({"text": ((ids.size, window), np.int32)})["text"]
        text.fill(-1)
        if int(n_valid.max(initial=0)) > window:
            raise ValueError(
                f"the row table gives windows of {int(n_valid.max())} tokens but the source "
                f"expects {window}: seq_length/add_extra_token mismatch"
            )
        self.bin_reader.read(
            spans.dataset.astype(np.int64), spans.offset, spans.length, text.reshape(-1),
            spans.row * window + dest,
        )
        return text, n_valid, spans

    def windows(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw token windows of `sample_ids`: (int32 `[k, window]` padded with -1, int64 `[k]`
        valid lengths), as `PlannedSource.windows`."""
        text, n_valid, _ = self._read(self._check_ids(sample_ids))
        return text, n_valid

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = self._check_ids(sample_ids)
        text, n_valid, spans = self._read(ids)
        dataset_ids = np.zeros(ids.size, np.int32)
        dataset_ids[spans.row[::-1]] = spans.dataset[::-1]  # each row's first piece
        pieces = (spans.row, spans.length) if self.options.inter_document_masking else None
        return schema.raw_windows(text, n_valid, dataset_ids, ids, pieces)

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return schema.assemble_windows(raw, self.options)

    def get_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        return self.assemble_batch(self.read_batch(sample_ids))

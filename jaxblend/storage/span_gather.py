"""One read for the spans of many datasets: sequence units in, tokens placed where asked.

A global step of a blend touches a few hundred of its (possibly thousands of) datasets. Reading
them one storage call at a time costs a Python round per dataset locally and, from a bucket, one
round trip per dataset one after another. `SpanGather.read` takes every span of the step at once,
as (dataset, sequence, token offset, length), and

* for memory-mapped datasets, copies all of them with the storage layer's one compiled kernel
  (`_gather.gather`; one call per token dtype present, usually one), whatever the number of
  datasets (the kernel takes the datasets' array addresses, so it stays in Numba's on-disk cache);
* for object-store datasets, issues every byte range of every dataset on one `ts.Batch`, so all
  requests of the step are in flight together, then places the bytes with the same kernel.

It is the one read path: sources read through it, and so do `IndexedDataset.get` and
`dataset[i]` / `dataset[i:j]` (a `SpanGather` over the one dataset). Byte pointers stay inside the
storage layer: callers speak in sequences and tokens.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import tensorstore as ts

from jaxblend.storage import _gather

if TYPE_CHECKING:
    from jaxblend.storage.reader import IndexedDataset


class _MappedGroup:
    """The memory-mapped datasets of one token dtype, as the kernel's address arrays.

    Holds the token and pointer arrays so the mappings behind the addresses stay alive.
    """

    def __init__(self, datasets: list[IndexedDataset], members: list[int], num_datasets: int):
        tokens = [ds._token_view() for ds in datasets]
        pointers = [np.ascontiguousarray(ds.sequence_pointers, dtype=np.int64) for ds in datasets]
        self._keep = (tokens, pointers)
        member = np.full(num_datasets, -1, np.int64)
        member[members] = np.arange(len(members))
        self.arguments = (
            member,
            np.array([t.ctypes.data for t in tokens], np.int64),
            np.array([t.shape[0] for t in tokens], np.int64),
            np.array([p.ctypes.data for p in pointers], np.int64),
            np.array([p.shape[0] for p in pointers], np.int64),
            tokens[0][:0],
        )


class SpanGather:
    """Reads token spans of several `IndexedDataset`s in one call (thread-safe, picklable).

    Args:
      datasets: the datasets; spans name them by position in this sequence.

    Attributes:
      requests: object-store requests issued so far by this process (coalesced ranges).
    """

    def __init__(self, datasets: Sequence[IndexedDataset]):
        self.datasets = list(datasets)
        self.requests = 0
        self._lock = threading.Lock()
        self._mapped: list[_MappedGroup] | None = None
        self._remote: list[int] | None = None

    def __getstate__(self) -> dict:
        return {"datasets": self.datasets}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["datasets"])

    def read(
        self,
        dataset: np.ndarray,
        sequence: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        out: np.ndarray,
        out_pos: np.ndarray,
        timeout: float | None = None,
    ) -> None:
        """Copies span j (tokens `[offset, offset + length)` of sequence `sequence[j]` of dataset
        `dataset[j]`) to `out[out_pos[j] : out_pos[j] + length[j]]`, converting to `out.dtype`.

        Args:
          dataset, sequence, offset, length, out_pos: int64[k] span descriptions.
          out: 1-D C-contiguous destination (e.g. a flattened `[rows, window]` array).
          timeout: longest wait for object-store reads, seconds (default: each dataset's
            `ObjectStoreOptions.request_timeout`).

        Raises:
          IndexError: if a span leaves its sequence's file.
          ValueError: if `out` is not a writeable 1-D C-contiguous array or a span does not fit it.
          ObjectStoreError, IndexFormatError: on object-store failures.
        """
        if dataset.size == 0:
            return
        if out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("SpanGather.read needs a writeable 1-D C-contiguous `out`")
        if dataset.size == 1:  # `get` and `dataset[i]`: plain integers are cheaper
            first, last = int(out_pos[0]), int(out_pos[0]) + int(length[0])
        else:
            first, last = int(out_pos.min()), int((out_pos + length).max())
        if first < 0 or last > out.shape[0]:
            end = out_pos + length
            j = int(np.flatnonzero((out_pos < 0) | (end > out.shape[0]))[0])
            raise ValueError(
                f"span {j} goes to out[{int(out_pos[j])}:{int(end[j])}], outside the {out.shape[0]} "
                "items of `out`"
            )
        mapped, remote = self._plans()
        for group in mapped:
            bad = _gather.gather(*group.arguments, dataset, sequence, offset, length, out, out_pos)
            if bad >= 0:
                ds = self.datasets[int(dataset[bad])]
                raise IndexError(
                    f"span {bad} (sequence {int(sequence[bad])}, offset {int(offset[bad])}, length "
                    f"{int(length[bad])}) leaves {ds.prefix}: the index maps do not match the data"
                )
        if remote:
            self._read_remote(remote, dataset, sequence, offset, length, out, out_pos, timeout)

    def _read_remote(self, remote, dataset, sequence, offset, length, out, out_pos, timeout):
        order = np.argsort(dataset, kind="stable")
        bounds = np.searchsorted(dataset[order], np.arange(len(self.datasets) + 1))
        touched = [d for d in remote if bounds[d + 1] > bounds[d]]
        self._load_indexes([self.datasets[d] for d in touched])
        pending = []
        with ts.Batch() as batch:
            for d in touched:
                sel = order[bounds[d] : bounds[d + 1]]
                ds = self.datasets[d]
                pointers = ds.sequence_pointers
                seq = sequence[sel]
                if seq.min() < 0 or seq.max() >= pointers.shape[0]:
                    raise IndexError(f"a span names a sequence outside {ds.prefix}")
                starts = pointers[seq] // ds.dtype.itemsize + offset[sel]
                counts = length[sel]
                ds._check_spans(starts, counts)
                if out.dtype == ds.dtype:  # the bytes go straight to their places
                    flat, dst = None, out_pos[sel]
                else:  # read, then convert while placing
                    flat = np.empty(int(counts.sum()), dtype=ds.dtype)
                    dst = np.cumsum(counts) - counts
                read = ds._begin_read(starts, counts, dst, batch)
                pending.append((ds, sel, flat, read))
        for ds, sel, flat, read in pending:
            wait = timeout or ds.object_store.request_timeout
            if flat is None:
                read.finish(out.view(np.uint8), wait)
            else:
                read.finish(flat.view(np.uint8), wait)
                _place(flat, sel, length, out, out_pos)
        with self._lock:
            self.requests += sum(read.requests for *_, read in pending)

    @staticmethod
    def _load_indexes(datasets: list[IndexedDataset]) -> None:
        """Fetches the `.idx` of every dataset not loaded yet, concurrently (one round trip)."""
        missing = [ds for ds in datasets if not ds._index_loaded]
        if len(missing) == 1:
            missing[0].sequence_pointers  # noqa: B018 - loads it
        elif missing:
            workers = min(len(missing), missing[0].object_store.request_concurrency)
            with concurrent.futures.ThreadPoolExecutor(workers, "jaxblend-idx") as pool:
                list(pool.map(lambda ds: ds.sequence_pointers, missing))

    def _plans(self):
        """Per token dtype, the typed lists the mapped kernel reads; indices of remote datasets."""
        if self._mapped is None:
            with self._lock:
                if self._mapped is None:
                    self._mapped, self._remote = self._build_plans()
        return self._mapped, self._remote

    def _build_plans(self):
        by_dtype: dict[np.dtype, list[int]] = {}
        remote: list[int] = []
        for d, ds in enumerate(self.datasets):
            if ds._token_view() is None:
                remote.append(d)
            else:
                by_dtype.setdefault(ds.dtype, []).append(d)
        mapped = [_MappedGroup([self.datasets[d] for d in members], members, len(self.datasets))
                  for members in by_dtype.values()]
        return mapped, remote


def _place(flat: np.ndarray, sel: np.ndarray, length: np.ndarray, out: np.ndarray, out_pos: np.ndarray) -> None:
    """Copies the consecutive runs of `flat` (spans `sel`, in order) to their places in `out`,
    with the one gather kernel (`flat` as a source of one sequence)."""
    counts = length[sel]
    _gather.gather(
        np.zeros(1, np.int64), np.array([flat.ctypes.data], np.int64), np.array([flat.size], np.int64),
        np.array([_ZERO.ctypes.data], np.int64), np.ones(1, np.int64), flat[:0],
        np.zeros(sel.size, np.int64), np.zeros(sel.size, np.int64), np.cumsum(counts) - counts,
        counts, out, out_pos[sel],
    )


_ZERO = np.zeros(1, np.int64)

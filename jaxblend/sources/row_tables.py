"""Where a `RowTableSpanIndex` gets its rows: a split's row table, read by sample range.

* `ArrayRowTables`: the four arrays in memory, or memory-mapped from a local map-store entry;
* `BucketRowTables`: the arrays as `.npy` objects of a map-store entry in a bucket, read by range:
  exactly the rows asked for, and the next steps' rows in the background once the loader's
  stride is seen (a bounded number of rows kept, least recently used dropped first).

Both pickle as their recipe (a directory or URL and the split), never as the arrays
(docs/row_tables.md).
"""

from __future__ import annotations

import bisect
import collections
import concurrent.futures
import functools
import io
import os
import sys
import threading
from typing import Protocol, runtime_checkable

import numpy as np
import tensorstore as ts

from jaxblend import access as access_lib
from jaxblend.index import row_table
from jaxblend.map_store.dataset_table import merge_runs
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store import location as _location
from jaxblend.storage.object_store import requests as _remote
from jaxblend.storage.token_reader import reader_context
from jaxblend.validation import require_int

RowSlices = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@runtime_checkable
class RowTables(Protocol):
    """Rows of one split's row table, by sample range."""

    def rows(self, lo: int, hi: int) -> RowSlices:
        """`(starts[lo : hi + 1], dataset, offset, length)` of samples `[lo, hi)`, the piece arrays
        covering `[starts[lo], starts[hi])`."""

    @property
    def is_remote(self) -> bool:
        """Whether the rows come from an object store."""

    @property
    def requests(self) -> int:
        """Object-store requests issued so far by this process."""

    @property
    def bytes_read(self) -> int:
        """Bytes read from an object store so far by this process."""


def _check_range(lo: int, hi: int, n: int, where: str) -> None:
    if not 0 <= lo < hi <= n:
        raise IndexError(f"rows [{lo}, {hi}) are outside the {n} samples of {where}")


class ArrayRowTables:
    """A row table held as arrays (in memory, or memory-mapped `.npy` files).

    Args:
      table: `{"starts", "dataset", "offset", "length"}` (`row_table.build_row_table`).
    """

    is_remote = False
    requests = 0
    bytes_read = 0

    def __init__(self, table: dict[str, np.ndarray]):
        missing = [f for f in row_table.FIELDS if f not in table]
        if missing:
            raise ValueError(f"row table lacks {missing}")
        self._starts, self._dataset, self._offset, self._length = (
            table[f] for f in row_table.FIELDS
        )
        p = int(self._starts[-1])
        if not self._dataset.shape[0] == self._offset.shape[0] == self._length.shape[0] == p:
            raise ValueError(
                f"row table's starts end at {p} but it holds {self._dataset.shape[0]}, "
                f"{self._offset.shape[0]}, {self._length.shape[0]} pieces"
            )

    @classmethod
    def load(cls, entry_dir: str, split: str) -> ArrayRowTables:
        """Memory-maps split `split`'s arrays from a local map-store entry directory.

        Raises:
          IndexFormatError: an array file is missing or unreadable.
        """
        table = {}
        for field in row_table.FIELDS:
            path = os.path.join(entry_dir, row_table.array_name(split, field) + ".npy")
            try:
                table[field] = np.load(path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as e:
                raise IndexFormatError(f"{path}: cannot read the row table: {e}") from None
        tables = cls(table)
        tables._recipe = (entry_dir, split)
        return tables

    _recipe: tuple[str, str] | None = None

    def __reduce__(self) -> tuple:
        if self._recipe is not None:  # a worker maps the files again instead of receiving copies
            return ArrayRowTables.load, self._recipe
        arrays = (self._starts, self._dataset, self._offset, self._length)
        return ArrayRowTables, (dict(zip(row_table.FIELDS, arrays)),)

    def __len__(self) -> int:
        return int(self._starts.shape[0]) - 1

    def rows(self, lo: int, hi: int) -> RowSlices:
        _check_range(lo, hi, len(self), "the row table")
        starts = self._starts[lo : hi + 1]
        a, b = int(starts[0]), int(starts[-1])
        return starts, self._dataset[a:b], self._offset[a:b], self._length[a:b]


class _Header:
    """The parsed header of one `.npy` object."""

    def __init__(self, url: str, head: bytes, generation: bytes):
        self.url = url
        self.generation = generation
        try:
            stream = io.BytesIO(head)
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        except ValueError as e:
            raise IndexFormatError(f"{url}: not a .npy array ({e})") from None
        self.data_offset = stream.tell()
        if fortran or len(shape) != 1:
            raise IndexFormatError(f"{url}: expected a 1-D C-order array, got shape {shape}")
        self.length = int(shape[0])
        self.dtype = dtype


def _header_size(head: bytes) -> int:
    """Bytes of the `.npy` header (magic, version, length field, header text)."""
    if len(head) < 12 or head[:6] != b"\x93NUMPY":
        return 0
    if head[6] == 1:
        return 10 + int.from_bytes(head[8:10], "little")
    return 12 + int.from_bytes(head[8:12], "little")


def _bytes_per_row(headers: dict[str, _Header]) -> float:
    """Table bytes per row on average: its `starts` entry and its share of the pieces."""
    rows = max(headers["starts"].length - 1, 1)
    return 8 + row_table.BYTES_PER_PIECE * headers["dataset"].length / rows


class _Block:
    """Rows `[lo, hi)` of the table as read: `starts[lo : hi + 1]` and their pieces."""

    __slots__ = ("dataset", "hi", "length", "lo", "offset", "starts")

    def __init__(self, lo: int, hi: int, arrays: RowSlices):
        self.lo, self.hi = lo, hi
        self.starts, self.dataset, self.offset, self.length = arrays

    def slice(self, lo: int, hi: int) -> RowSlices:
        a, b = lo - self.lo, hi - self.lo
        p0, p1 = int(self.starts[a] - self.starts[0]), int(self.starts[b] - self.starts[0])
        return self.starts[a : b + 1], self.dataset[p0:p1], self.offset[p0:p1], self.length[p0:p1]


class BucketRowTables:
    """A split's row table read by range from a map-store entry in a bucket.

    The arrays are the `.npy` objects `<entry_url>/<split>.rows.{starts,dataset,offset,length}.npy`
    (`row_table.array_name`). The first use reads the four headers (one round of small
    requests). A read of rows `[lo, hi)` that is not held reads exactly those rows: `starts` of the
    range, then its pieces (two rounds of concurrent requests). Nothing else of the table is read
    on demand, so a host that runs a few rows of each step pays for those rows only.

    Read-ahead (docs/row_tables.md): once the stride of the calls is seen (a loader's global
    batch size), the next runs `lo + j x stride` are fetched in the background, up to
    `chunk_samples` rows or `MAX_RUNS_AHEAD` runs ahead, nearby runs merged. Held rows are bounded
    by `cache_chunks x chunk_samples` (least recently used dropped first). Every read must see
    the object generation its header read saw.

    Args:
      entry_url: the map-store entry's URL (`gs://b/maps/<key>/`).
      split: the split name.
      access: object-store options (default: `DataAccess.from_env()`).
      chunk_samples: rows one read-ahead fetches at most (default: about 1 MB of table).
      cache_chunks: rows held at most, in units of `chunk_samples` (>= 2).
      prefetch: whether to read ahead in the background.
    """

    is_remote = True
    MAX_RUNS_AHEAD = 64

    def __init__(
        self,
        entry_url: str,
        split: str,
        access: access_lib.DataAccess | None = None,
        *,
        chunk_samples: int | None = None,
        cache_chunks: int = 4,
        prefetch: bool = True,
    ):
        if chunk_samples is not None:
            require_int("BucketRowTables.chunk_samples", chunk_samples, 1)
        require_int("BucketRowTables.cache_chunks", cache_chunks, 2)
        self.entry_url = entry_url.rstrip("/") + "/"
        self.split = split
        self.access = access if access is not None else access_lib.DataAccess.from_env()
        self._chunk_arg = None if chunk_samples is None else int(chunk_samples)
        self.cache_chunks = int(cache_chunks)
        self.prefetch = bool(prefetch)
        self._names = {f: row_table.array_name(split, f) + ".npy" for f in row_table.FIELDS}
        self.requests = 0
        self.bytes_read = 0
        self._lock = threading.Lock()
        self._kv: ts.KvStore | None = None
        self._headers: dict[str, _Header] | None = None
        self.chunk_samples = self._chunk_arg
        self._blocks: collections.OrderedDict[tuple[int, int], _Block] = collections.OrderedDict()
        self._keys: list[tuple[int, int]] = []  # the held blocks' (lo, hi), sorted
        self._held_rows = 0
        self._inflight: dict[tuple[int, int], concurrent.futures.Future] = {}
        self._recent: collections.deque[int] = collections.deque(maxlen=8)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def __reduce__(self) -> tuple:  # the recipe: each process reads its own headers and rows
        options = {"chunk_samples": self._chunk_arg, "cache_chunks": self.cache_chunks,
                   "prefetch": self.prefetch}
        return functools.partial(BucketRowTables, **options), (self.entry_url, self.split, self.access)

    def __repr__(self) -> str:
        return f"BucketRowTables({self.entry_url!r}, split={self.split!r})"

    def __len__(self) -> int:
        return self._open()["starts"].length - 1

    @property
    def held_blocks(self) -> list[tuple[int, int]]:
        """Row ranges `(lo, hi)` held in memory, least recently used first."""
        with self._lock:
            return list(self._blocks)

    @property
    def held_rows(self) -> int:
        """Rows held in memory (at most `cache_chunks x chunk_samples` plus one read)."""
        with self._lock:
            return self._held_rows

    # ------------------------------------------------------------------------------- reading

    def rows(self, lo: int, hi: int) -> RowSlices:
        headers = self._open()
        _check_range(lo, hi, headers["starts"].length - 1, self.entry_url + self._names["starts"])
        with self._lock:
            block = self._covering(lo, hi)
            future = None if block is not None else self._inflight_covering(lo, hi)
            self._recent.append(lo)
            stride = self._stride()
        if block is None and future is not None:
            future.result()
            with self._lock:
                block = self._covering(lo, hi)
        if block is None:
            block = self._read_blocks([(lo, hi)])[0]
            with self._lock:
                self._hold(block)
        if self.prefetch and stride:
            self._read_ahead(lo, hi, stride)
        return block.slice(lo, hi)

    def _covering(self, lo: int, hi: int, touch: bool = True) -> _Block | None:
        """A held block holding rows `[lo, hi)` (under the lock); `touch` marks it recently used.

        Looks at the few held blocks starting at or before `lo`, nearest first (blocks may
        overlap: a demand read inside a read-ahead range)."""
        i = bisect.bisect_right(self._keys, (lo, sys.maxsize))
        for key in reversed(self._keys[max(0, i - 4) : i]):
            if key[1] >= hi:
                if touch:
                    self._blocks.move_to_end(key)
                return self._blocks[key]
        return None

    def _inflight_covering(self, lo: int, hi: int) -> concurrent.futures.Future | None:
        for (a, b), future in self._inflight.items():
            if a <= lo and hi <= b:
                return future
        return None

    def _stride(self) -> int:
        """The distance between the starts of consecutive calls, if the recent calls agree on
        one (calls may arrive out of order from several reader threads), else 0."""
        starts = sorted(set(self._recent))
        if len(starts) < 2:
            return 0
        gaps = np.diff(starts)
        stride = int(gaps.min())
        return stride if stride > 0 and not np.any(gaps % stride) else 0

    def _hold(self, block: _Block) -> None:
        """Keeps a block, dropping the least recently used beyond the bound (under the lock)."""
        key = (block.lo, block.hi)
        if key in self._blocks:
            return
        self._blocks[key] = block
        bisect.insort(self._keys, key)
        self._held_rows += block.hi - block.lo
        limit = self.cache_chunks * self.chunk_samples
        while self._held_rows > limit and len(self._blocks) > 1:
            old, _ = self._blocks.popitem(last=False)
            del self._keys[bisect.bisect_left(self._keys, old)]
            self._held_rows -= old[1] - old[0]

    def _read_ahead(self, lo: int, hi: int, stride: int) -> None:
        """Fetches the next runs `[lo + j x stride, hi + j x stride)` not held yet, in the
        background, when fewer than half of the planned runs ahead are held or in flight."""
        n = self._open()["starts"].length - 1
        width = hi - lo
        count = max(1, min(self.MAX_RUNS_AHEAD, self.chunk_samples // max(width, 1)))
        runs = [(lo + j * stride, min(n, hi + j * stride)) for j in range(1, count + 1)]
        runs = [(a, b) for a, b in runs if a < n]
        with self._lock:
            missing = [r for r in runs if self._covering(*r, touch=False) is None
                       and self._inflight_covering(*r) is None]
            if not missing or len(missing) < (len(runs) + 1) // 2:
                return
            merged = merge_runs(missing, self._merge_gap())
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, "jaxblend-rows")
            future = self._pool.submit(self._fetch, merged)  # it takes the lock to finish
            self._inflight.update(dict.fromkeys(merged, future))

    def _merge_gap(self) -> int:
        """Rows between two runs worth reading to save a request (about `coalesce_gap` bytes)."""
        return int(self.access.object_store.coalesce_gap / _bytes_per_row(self._headers))

    def _fetch(self, runs: list[tuple[int, int]]) -> None:
        """Reads and holds `runs` (a reader waiting for them gets any error from the future)."""
        try:
            blocks = self._read_blocks(runs)
            with self._lock:
                for block in blocks:
                    self._hold(block)
        finally:
            with self._lock:
                for run in runs:
                    self._inflight.pop(run, None)

    def _read_blocks(self, runs: list[tuple[int, int]]) -> list[_Block]:
        """Rows of each run: `starts` of every run (one round), then their pieces (one round)."""
        headers = self._open()
        pieces = headers["dataset"].length
        starts = self._read_ranges([("starts", lo, hi + 1) for lo, hi in runs])
        wanted = []
        for (lo, hi), s in zip(runs, starts):
            a, b = int(s[0]), int(s[-1])
            if b < a or b > pieces:
                raise IndexFormatError(
                    f"{self.entry_url}{self._names['starts']}: rows [{lo}, {hi}) name pieces "
                    f"[{a}, {b}) outside the {pieces} pieces of the table; the entry is corrupt"
                )
            wanted += [("dataset", a, b), ("offset", a, b), ("length", a, b)]
        arrays = self._read_ranges(wanted)
        return [
            _Block(lo, hi, (s, *arrays[3 * i : 3 * i + 3]))
            for i, ((lo, hi), s) in enumerate(zip(runs, starts))
        ]

    def _read_ranges(self, wanted: list[tuple[str, int, int]]) -> list[np.ndarray]:
        """Elements `[i, j)` of each named array, read concurrently (one round)."""
        headers = self._open()
        kv = self._kv
        timeout = self.access.object_store.request_timeout
        futures = []
        for field, i, j in wanted:
            h = headers[field]
            itemsize = h.dtype.itemsize
            span = slice(h.data_offset + i * itemsize, h.data_offset + j * itemsize)
            futures.append(_remote.read(kv, self._names[field], span) if j > i else None)
        out = []
        nbytes = 0
        for (field, i, j), future in zip(wanted, futures):
            h = headers[field]
            if future is None:
                out.append(np.zeros(0, h.dtype))
                continue
            url = self.entry_url + self._names[field]
            try:
                res = _remote.wait(future, url, f"reading elements [{i}, {j})", timeout)
            except ValueError:
                res = None
            if res is None or res.state != "value" or len(res.value) != (j - i) * h.dtype.itemsize:
                raise IndexFormatError(
                    f"{url}: elements [{i}, {j}) could not be read; the entry changed or vanished "
                    "since its header was read (publish the maps again)"
                )
            if bytes(res.stamp.generation) != h.generation:
                raise IndexFormatError(
                    f"{url} was rewritten while it was being read (a new object generation); "
                    "restart after the maps are published again"
                )
            nbytes += len(res.value)
            out.append(np.frombuffer(res.value, dtype=h.dtype))
        with self._lock:
            self.requests += sum(f is not None for f in futures)
            self.bytes_read += nbytes
        return out

    def _open(self) -> dict[str, _Header]:
        headers = self._headers
        if headers is not None:
            return headers
        with self._lock:
            if self._headers is None:
                self._headers = self._read_headers()
            return self._headers

    def _read_headers(self) -> dict[str, _Header]:
        """Reads and checks the four `.npy` headers (under the lock, once per process)."""
        store = self.access.object_store
        spec = store.complete_spec(ts.KvStore.Spec(self.entry_url).to_json())
        self._kv = kv = _location.open_kvstore(spec, reader_context(store))
        probe = 128  # a 1-D array's header; more is read when the header says so
        futures = {f: _remote.read(kv, name, slice(0, probe)) for f, name in self._names.items()}
        headers = {}
        for field, name in self._names.items():
            url = self.entry_url + name
            head, generation = self._head(kv, name, url, futures[field])
            need = _header_size(head)
            if need > len(head):
                head, generation = self._head(kv, name, url, _remote.read(kv, name, slice(0, need)))
            headers[field] = h = _Header(url, head, generation)
            want = np.dtype(row_table.DTYPES[field]).newbyteorder("<")
            if h.dtype != want:
                raise IndexFormatError(f"{url}: dtype {h.dtype}, expected {want}")
        p = headers["dataset"].length
        if headers["starts"].length < 1 or any(headers[f].length != p for f in ("offset", "length")):
            raise IndexFormatError(
                f"{self.entry_url}: the row-table arrays of split {self.split!r} disagree in size"
            )
        if self.chunk_samples is None:
            self.chunk_samples = max(1, int((1 << 20) / _bytes_per_row(headers)))
        return headers

    def _head(self, kv, name: str, url: str, future) -> tuple[bytes, bytes]:
        timeout = self.access.object_store.request_timeout
        self.requests += 1
        try:
            res = _remote.wait(future, url, "reading the array header", timeout)
        except ValueError:  # a small object: read it whole
            self.requests += 1
            res = _remote.wait(_remote.read(kv, name), url, "reading the array", timeout)
        if res.state != "value":
            raise IndexFormatError(
                f"{url}: the row table does not exist (publish the maps with "
                "python -m jaxblend.tools.build_index)"
            )
        value = bytes(res.value)
        self.bytes_read += len(value)
        return value, bytes(res.stamp.generation)

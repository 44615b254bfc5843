"""The one token reader of the package: `.bin` token ranges, by token offset, in one call per batch.

Every token jaxblend reads goes through `TokenReader.read`: a source's batch (the pieces its span
index gives, `jaxblend.sources.span_index`), `IndexedDataset.get`, `dataset[i]` and slices, and the
masked-LM and sequence sources (through `sequence_spans.SequenceSpans`). A read names ranges as
(dataset, token offset in its `.bin`, length, destination); the reader knows, per dataset, only
what `BinDataset` records: where the `.bin` is, its token dtype, its size and the object version
the ranges were computed for. No `.idx` is needed, and a dataset is opened the first time one of
its ranges is read, so a host touches only the `.bin` objects of its own rows.

* Local files ("auto"/"mmap" backend of `DataAccess`): the `.bin` is memory-mapped on first use
  (its size and, when recorded, its version stamp checked) and every range of every mapped
  dataset is copied by the storage layer's one compiled kernel (`_gather.gather`, one call per
  token dtype present, usually one), which also checks every range: once every `.bin` of a reader
  is mapped, a read is that one call and no Python check.
* Buckets (and the "tensorstore" backend): one kvstore per bucket; the ranges of one call are
  issued together on one `ts.Batch` through `_remote.RangeRead` (sorted, ranges closer than
  `ObjectStoreOptions.coalesce_gap` merged, bounded by `request_concurrency`, retried and timed
  out as every other read). Every answer's object generation is compared with the recorded one: a
  rewritten `.bin` is refused.

Every read option (backend, concurrency, coalescing, retries, timeout) comes from the one
`DataAccess` the reader is given.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import tensorstore as ts

from jaxblend import access as access_lib
from jaxblend.storage import _gather, _mapping, _open, read_tally
from jaxblend.storage.dataset_identity import memo as identity_memo
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store import location as _location
from jaxblend.storage.object_store import requests as _remote
from jaxblend.validation import require_int

REPUBLISH = "publish the maps again with python -m jaxblend.tools.build_index"


@dataclasses.dataclass(frozen=True)
class BinDataset:
    """What a reader needs to know of one dataset's `.bin` (recorded when the maps are published).

    Attributes:
      prefix: the dataset prefix (local path, `file://` or bucket URL); the object is
        `<prefix>.bin`.
      dtype: the token dtype (numpy spelling, e.g. "<u2").
      bin_size: the `.bin`'s size in bytes.
      generation: the `.bin` version the maps were built for (object generation; for a local file
        its `identity_memo.local_version` stamp), or None to not check it.
    """

    prefix: str
    dtype: str
    bin_size: int
    generation: bytes | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not self.prefix:
            raise ValueError(f"BinDataset.prefix must be a non-empty path or URL, got {self.prefix!r}")
        dtype = np.dtype(self.dtype)
        if dtype.kind not in "iuf":
            raise ValueError(
                f"{self.prefix}.bin: token dtype must be an integer or floating type (Megatron's "
                f"`.idx` dtypes), got {dtype}"
            )
        object.__setattr__(self, "dtype", dtype.str)
        require_int(f"{self.prefix}.bin: bin_size", self.bin_size, 0)
        object.__setattr__(self, "bin_size", int(self.bin_size))
        if self.bin_size % dtype.itemsize:
            raise ValueError(
                f"{self.prefix}.bin: bin_size {self.bin_size} is not a multiple of the "
                f"{dtype.itemsize}-byte tokens"
            )
        if self.generation is not None:
            object.__setattr__(self, "generation", bytes(self.generation))

    @property
    def num_tokens(self) -> int:
        return self.bin_size // np.dtype(self.dtype).itemsize


@runtime_checkable
class LazyBinDatasets(Protocol):
    """Datasets described on demand (a publication's dataset table,
    `jaxblend.map_store.dataset_table.PublishedBins`): a reader asks for the datasets of a read
    before it opens them, and never for the others.

    Attributes:
      num_tokens: int64 per dataset, filled in place as datasets are described.
      itemsizes: int64 per dataset, filled in place as datasets are described.
      remote: whether some dataset is in an object store.
    """

    num_tokens: np.ndarray
    itemsizes: np.ndarray
    remote: bool

    def __len__(self) -> int: ...

    def __getitem__(self, d: int) -> BinDataset: ...

    def ensure(self, ids: Sequence[int]) -> None:
        """Describes datasets `ids` (one batched look-up)."""

    def prefixes(self) -> list[str]:
        """Every dataset's prefix, in order (when not known otherwise, describes them all)."""

    def fingerprints(self, ids: Sequence[int] | None = None) -> dict[str, str]:
        """The content fingerprints of datasets `ids` (None: every dataset) by prefix
        (describes those)."""


@dataclasses.dataclass
class _Opened:
    """One dataset's per-process state."""

    name: str  # display name of the `.bin`
    dtype: np.dtype
    tokens: np.ndarray | None = None  # mapped local `.bin`
    kvstore: ts.KvStore | None = None  # remote (or "tensorstore" backend)
    key: str = ""
    generation: bytes | None = None  # the version reads must see (published, else first seen)
    check_stamps: bool = False  # whether read stamps are comparable with `generation`
    store: str = "local"  # the store's name in read tallies (`read_tally`)


class TokenReader:
    """Reads token ranges of several `.bin` files by token offset (thread-safe, picklable).

    Args:
      datasets: the datasets; ranges name them by position in this sequence. A
        `LazyBinDatasets` is kept as given and asked for the datasets of each read that are not
        opened yet.
      access: object-store options and backend (default: `DataAccess.from_env()`).

    Attributes:
      requests: object-store requests issued so far by this process (coalesced ranges).
      bytes_read: bytes read so far by this process (object-store bytes requested; local bytes
        copied).
    """

    def __init__(
        self, datasets: Sequence[BinDataset], access: access_lib.DataAccess | None = None
    ) -> None:
        self._lazy = isinstance(datasets, LazyBinDatasets)
        self.datasets = datasets if self._lazy else list(datasets)
        for d in [] if self._lazy else self.datasets:
            if not isinstance(d, BinDataset):
                raise TypeError(f"datasets must be BinDataset, got {type(d).__name__}")
        self.access = access if access is not None else access_lib.DataAccess.from_env()
        self.requests = 0
        self.bytes_read = 0
        self._lock = threading.Lock()
        self._opened: dict[int, _Opened] = {}
        self._kvstores: dict[str, ts.KvStore] = {}
        n = len(self.datasets)
        # per token dtype: (an empty array of it, d -> d if mapped else -1, its item size)
        self._member: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}
        self._addr = np.zeros(n, np.int64)
        self._count = np.zeros(n, np.int64)
        self._state = np.zeros(n, np.int8)  # 0 unopened, 1 mapped, 2 read by requests
        if self._lazy:  # filled in place as the datasets are described
            self._num_tokens, self._itemsize = datasets.num_tokens, datasets.itemsizes
        else:
            self._num_tokens = np.array([d.num_tokens for d in self.datasets], np.int64)
            self._itemsize = np.array([np.dtype(d.dtype).itemsize for d in self.datasets], np.int64)
        self._all_mapped = False  # set once every dataset is mapped (then one kernel call a read)

    def __reduce__(self):  # pickled as its arguments: each process opens its own
        return type(self), (self.datasets, self.access)

    @property
    def opened(self) -> list[int]:
        """Ids of the datasets this process has opened, ascending."""
        with self._lock:
            return sorted(self._opened)

    def read(
        self,
        dataset: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        out: np.ndarray,
        out_pos: np.ndarray,
    ) -> None:
        """Copies range j (tokens `[offset[j], offset[j] + length[j])` of dataset `dataset[j]`'s
        `.bin`) to `out[out_pos[j] : out_pos[j] + length[j]]`, converting to `out.dtype`.

        Args:
          dataset, offset, length, out_pos: int64[k] range descriptions (empty ranges are skipped).
          out: 1-D C-contiguous writeable destination.

        Raises:
          IndexError: a range outside its `.bin` (as published) or an unknown dataset.
          ValueError: `out` is not a writeable 1-D C-contiguous array or a range does not fit it.
          IndexFormatError: a `.bin` is missing, shorter than published, or was rewritten.
          ObjectStoreError: the object store failed or timed out.
        """
        dataset, offset, length, out_pos = (
            np.ascontiguousarray(a, np.int64).reshape(-1) for a in (dataset, offset, length, out_pos)
        )
        if out.ndim != 1 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("TokenReader.read needs a writeable 1-D C-contiguous `out`")
        if self._all_mapped:  # every `.bin` is mapped: the kernel checks every range
            self._read_mapped(dataset, offset, length, out, out_pos)
            return
        keep = length > 0
        if not keep.all():
            dataset, offset, length, out_pos = dataset[keep], offset[keep], length[keep], out_pos[keep]
        if dataset.size == 0:
            return
        self._check_destinations(dataset, length, out, out_pos)
        touched = np.flatnonzero(np.bincount(dataset, minlength=len(self.datasets)))
        kinds = self._state[touched]  # 0 unopened, 1 mapped, 2 read by requests
        if (kinds == 0).any():
            self._open_all(touched[kinds == 0].tolist())
            kinds = self._state[touched]
        if (kinds == 1).all():  # every range from local maps: the kernel checks the ranges
            self._read_mapped(dataset, offset, length, out, out_pos)
            return
        self._check_ranges(dataset, offset, length)
        if (kinds == 1).any():
            self._read_mapped(dataset, offset, length, out, out_pos)
        self._read_remote(touched[kinds == 2], dataset, offset, length, out, out_pos)

    # ------------------------------------------------------------------------------ local maps

    def _read_mapped(self, dataset, offset, length, out, out_pos) -> None:
        """Copies the ranges of the mapped datasets with the gather kernel, one call per token
        dtype mapped so far (usually one); the kernel skips ranges of other datasets and stops at
        the first bad range, which is then named."""
        nbytes = 0
        for like, member, itemsize in list(self._member.values()):
            bad, copied = _gather.gather(
                member, self._addr, self._count, like, dataset, offset, length, out, out_pos
            )
            nbytes += copied * itemsize
            if bad >= 0:  # a mapped `.bin` has its recorded size (checked when it was opened)
                keep = length > 0
                self._check_destinations(dataset[keep], length[keep], out, out_pos[keep])
                self._check_ranges(dataset[keep], offset[keep], length[keep])
                raise IndexError(f"range {bad} leaves {self.datasets[int(dataset[bad])].prefix}.bin")
        with self._lock:
            self.bytes_read += nbytes
        tally = read_tally.current()
        if tally is not None:
            self._tally_mapped(tally, dataset, length, nbytes)

    def _tally_mapped(self, tally, dataset, length, nbytes) -> None:
        """Adds a mapped read to `tally`: its bytes, and each dataset's (one bincount)."""
        tally.add("local", nbytes)
        if not self._all_mapped:  # only the ranges of mapped datasets were copied here
            mapped = self._state[dataset] == 1
            dataset, length = dataset[mapped], length[mapped]
        if len(self.datasets) == 1:
            tally.add_dataset(self.datasets[0].prefix, nbytes)
            return
        per = np.bincount(dataset, weights=length * self._itemsize[dataset],
                          minlength=len(self.datasets))
        for d in np.flatnonzero(per).tolist():
            tally.add_dataset(self.datasets[d].prefix, int(per[d]))

    def _check_destinations(self, dataset, length, out, out_pos) -> None:
        """Refuses the first non-empty range that leaves `out` or names an unknown dataset.

        Raises:
          ValueError: a range outside `out`.
          IndexError: an unknown dataset.
        """
        end = out_pos + length
        if out_pos.min(initial=0) < 0 or end.max(initial=0) > out.shape[0]:
            j = int(np.flatnonzero((out_pos < 0) | (end > out.shape[0]))[0])
            raise ValueError(
                f"range {j} goes to out[{int(out_pos[j])}:{int(end[j])}], outside the "
                f"{out.shape[0]} items of `out`"
            )
        n = len(self.datasets)
        if dataset.min(initial=0) < 0 or dataset.max(initial=0) >= n:
            bad = int(dataset[(dataset < 0) | (dataset >= n)][0])
            raise IndexError(f"range names dataset {bad}; there are {n}")

    def _check_ranges(self, dataset, offset, length) -> None:
        """Refuses the first range outside its `.bin` (as recorded).

        Raises:
          IndexError: naming the range and the file.
        """
        limit = self._num_tokens[dataset]
        bad = np.flatnonzero((offset < 0) | (offset > limit - length))
        if bad.size:
            j = int(bad[0])
            d = int(dataset[j])
            raise IndexError(
                f"range start={int(offset[j])}, length={int(length[j])} leaves the "
                f"{int(limit[j])} tokens of {self.datasets[d].prefix}.bin: the index maps (or row "
                f"table) do not match the data; {REPUBLISH}"
            )

    # ---------------------------------------------------------------------------- object stores

    def _read_remote(self, remote, dataset, offset, length, out, out_pos) -> None:
        """Reads the ranges of datasets `remote` (ascending ids) by requests, one `ts.Batch`."""
        with self._lock:
            opened = {d: self._opened[d] for d in remote.tolist()}
        order = np.argsort(dataset, kind="stable")
        grouped = dataset[order]
        starts, stops = np.searchsorted(grouped, remote), np.searchsorted(grouped, remote + 1)
        pending = []
        tally = read_tally.current()
        with ts.Batch() as batch:
            for d, lo, hi in zip(opened, starts.tolist(), stops.tolist()):
                sel = order[lo:hi]
                state = opened[d]
                itemsize = state.dtype.itemsize
                counts = length[sel]
                if out.dtype == state.dtype:  # the bytes go straight to their places
                    flat, dst = None, out_pos[sel]
                else:  # read, then convert while placing
                    flat = np.empty(int(counts.sum()), dtype=state.dtype)
                    dst = np.cumsum(counts) - counts
                read = _remote.RangeRead(
                    state.kvstore, state.key, state.name, offset[sel] * itemsize, counts * itemsize,
                    dst * itemsize, self.access.object_store.coalesce_gap, batch,
                )
                pending.append((d, sel, flat, read))
                if tally is not None:
                    read.time_answers()
                    if tally.pending is not None:
                        tally.pending.register(read, state.store, time.perf_counter())
        submitted = time.perf_counter()
        wait = self.access.object_store.request_timeout
        try:
            for d, sel, flat, read in pending:
                try:
                    read.finish((out if flat is None else flat).view(np.uint8), wait)
                except IndexFormatError:
                    raise IndexFormatError(
                        f"{opened[d].name}: a read within the {self.datasets[d].bin_size} bytes "
                        "recorded when the maps were published got fewer bytes: the object is "
                        f"shorter than published or was removed; {REPUBLISH}"
                    ) from None
                self._check_generations(d, opened[d], read.generations)
                if flat is not None:
                    _gather.place_runs(flat, length[sel], out, out_pos[sel])
        finally:
            with self._lock:
                self.requests += sum(read.requests for *_, read in pending)
                self.bytes_read += sum(read.bytes_requested for *_, read in pending)
            if tally is not None:
                self._tally_remote(tally, opened, pending, submitted)

    def _tally_remote(self, tally, opened, pending, submitted: float) -> None:
        """Adds a call's requests to `tally` (per store and dataset) and unregisters them."""
        for d, _, _, read in pending:
            store = opened[d].store
            tally.add(store, read.bytes_requested, read.requests)
            tally.add_dataset(self.datasets[d].prefix, read.bytes_requested)
            tally.add_latencies(store, read.latencies(submitted))
            if tally.pending is not None:
                tally.pending.unregister(read)

    def _check_generations(self, d: int, state: _Opened, seen: list[bytes]) -> None:
        if not seen or not state.check_stamps:
            return
        with self._lock:
            if state.generation is None:
                state.generation = seen[0]
            expected = state.generation
        for generation in seen:
            if generation != expected:
                published = self.datasets[d].generation is not None
                raise IndexFormatError(
                    f"{state.name} was rewritten after the index maps were "
                    f"{'published' if published else 'first read'} (generation "
                    f"{_show(generation)}, maps built for {_show(expected)}): {REPUBLISH}"
                )

    # ---------------------------------------------------------------------------------- opening

    def _open_all(self, ids: list[int]) -> None:
        with self._lock:
            missing = [d for d in ids if d not in self._opened]
        if self._lazy and missing:  # one look-up for the datasets of this read
            self.datasets.ensure(missing)
        for d in missing:
            state = self._open(self.datasets[d])
            with self._lock:
                if d not in self._opened:
                    self._opened[d] = state
                    if state.tokens is not None:
                        self._map_member(d, state)
                    self._state[d] = 1 if state.tokens is not None else 2  # last: now readable
                    self._all_mapped = bool((self._state == 1).all())

    def _map_member(self, d: int, state: _Opened) -> None:
        """Enters a mapped `.bin` into the kernel's address arrays (under the lock)."""
        dtype = state.dtype
        if dtype.str not in self._member:
            member = np.full(len(self.datasets), -1, np.int64)
            self._member[dtype.str] = (np.zeros(0, dtype), member, dtype.itemsize)
        self._addr[d] = state.tokens.ctypes.data if state.tokens.size else 0
        self._count[d] = state.tokens.shape[0]
        self._member[dtype.str][1][d] = d

    def _open(self, ds: BinDataset) -> _Opened:
        loc = _location.resolve(ds.prefix, self.access.object_store)
        name = loc.file_name(".bin")
        dtype = np.dtype(ds.dtype)
        if loc.local_prefix is not None:
            path = loc.local_prefix + ".bin"
            try:
                size = os.stat(path).st_size
                version, _ = identity_memo.local_version(path)
            except FileNotFoundError:
                raise IndexFormatError(f"{name}: data file does not exist; {REPUBLISH}") from None
            if size != ds.bin_size:
                raise IndexFormatError(
                    f"{name} is {size} bytes but the index maps were published for {ds.bin_size} "
                    f"bytes: the file was rewritten; {REPUBLISH}"
                )
            if ds.generation is not None and version != ds.generation:
                raise IndexFormatError(
                    f"{name} was rewritten after the index maps were published (its version stamp "
                    f"changed): {REPUBLISH}"
                )
            if self.access.backend != "tensorstore":
                tokens = (np.frombuffer(_mapping.map_readonly(path), dtype=dtype)
                          if ds.bin_size else np.zeros(0, dtype))
                return _Opened(name=name, dtype=dtype, tokens=tokens)
            kv, key = self._kvstore(loc)
            return _Opened(name=name, dtype=dtype, kvstore=kv, key=key)
        kv, key = self._kvstore(loc)
        driver = str(loc.kvstore.get("driver", ""))
        return _Opened(name=name, dtype=dtype, kvstore=kv, key=key, generation=ds.generation,
                       check_stamps=True, store=read_tally.STORE_OF_DRIVER.get(driver, driver))

    def _kvstore(self, loc: _location.Location) -> tuple[ts.KvStore, str]:
        """The kvstore of `loc`'s bucket (one per bucket and process) and the `.bin`'s key in it."""
        spec = dict(loc.kvstore)
        key = spec.get("path", "") + loc.bin_key
        spec["path"] = ""
        cache_key = json.dumps(spec, sort_keys=True)
        with self._lock:
            kv = self._kvstores.get(cache_key)
        if kv is None:
            root = dataclasses.replace(loc, kvstore=spec)
            kv = _open.open_kvstore(root, reader_context(self.access.object_store))
            with self._lock:
                kv = self._kvstores.setdefault(cache_key, kv)
        return kv, key


def reader_context(store: access_lib.ObjectStoreOptions) -> ts.Context:
    """The TensorStore context buckets are read with (the one `IndexedDataset` opens a bucket's
    `.idx` with: one request-concurrency limit and one connection pool per process)."""
    return _location.context_for({"file_io_mode": {"mode": "default"}, **store.context_spec()})


def _show(generation: bytes) -> str:
    """A generation for a message: its text when printable (GCS numbers, S3 ETags), else hex."""
    try:
        text = generation.decode("ascii")
    except UnicodeDecodeError:
        return generation.hex()
    return text if text.isprintable() else generation.hex()



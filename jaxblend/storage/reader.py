"""Reads IndexedDataset files (`prefix.bin` + `prefix.idx`) through TensorStore or a local mmap.

`IndexedDataset` is the storage layer's reader. The `.idx` is decoded once into numpy views (a
memory map for local files, one TensorStore read otherwise); the `.bin` is never read whole: token
spans are fetched by byte range.

Backends:
* `"mmap"`: local files only; the `.bin` is memory-mapped and spans are gathered by a compiled
  kernel. Fastest on a local disk.
* `"tensorstore"`: any kvstore TensorStore supports (file, gs://, s3://, memory://); the spans of
  one call are sorted, coalesced (ranges closer than `coalesce_gap` bytes merge) and issued together
  in one `ts.Batch`.
* `"auto"` (default): `"mmap"` for local prefixes, `"tensorstore"` otherwise.

Accepted prefix forms are listed in `jaxblend.storage._location` (local path, `file://`, kvstore URL,
kvstore spec dict). Objects pickle as their prefix and options; file handles reopen lazily (under a
lock) in each process, and a dataset whose files changed in between is refused.

Cost contract: opening costs O(N) to validate the index (vectorized, blockwise); `get` and friends
cost one bounds check plus the bytes read; `read_token_spans` is the batch hot path: use it (or
`get_many`) rather than `get` in a loop.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import mmap
import operator
import os
import re
import threading
from typing import Any

import numpy as np
import tensorstore as ts

from jaxblend.storage import _gather, _location, idx_format
from jaxblend.storage.idx_format import IndexArrays, IndexFormatError

_BACKENDS = ("auto", "mmap", "tensorstore")
_FILE_IO_MODES = ("memmap", "default", "direct")
_HASH_CHUNK = 64 << 20
_SIZE_IN_ERROR = re.compile(r"value of size (\d+)")


@dataclasses.dataclass
class _Handles:
    """Per-process open state of a dataset."""

    arrays: IndexArrays
    idx_buffer: Any  # mmap.mmap | bytes; the arrays alias it
    bin_size: int
    bin_tokens: np.ndarray | None  # mmap backend: flat token view over the mapped .bin
    bin_mmap: mmap.mmap | None
    kvstore: ts.KvStore | None  # tensorstore backend


class IndexedDataset:
    """A read-only Megatron-Core IndexedDataset.

    Thread-safe and picklable; see the module docstring for backends and prefix forms.

    Args:
        prefix: dataset prefix: local path, `file://`/`gs://`/`s3://`/`memory://` URL, or kvstore
            spec dict whose "path" ends with the file prefix.
        backend: "auto", "mmap" (local only) or "tensorstore".
        multimodal: None to detect sequence modes from the `.idx` length; True to require them;
            False to ignore them.
        file_io_mode: TensorStore file driver I/O mode: "default" (pread), "memmap" or "direct".
            "default" measured 1.2-1.5x faster than "memmap" for random windows here (with
            "memmap", copying each result out of TensorStore's per-read mapping page-faults).
        io_concurrency: TensorStore request concurrency limit (file, GCS and S3), None for default.
        context: extra TensorStore context spec (JSON dict) layered on jaxblend's shared context.
        coalesce_gap: TensorStore backend: byte ranges separated by fewer bytes are read as one.

    Raises:
        ValueError: on an invalid option or prefix.
        IndexFormatError: if a file is missing or malformed, or the pair disagrees.
    """

    def __init__(
        self,
        prefix: str | os.PathLike | dict,
        *,
        backend: str = "auto",
        multimodal: bool | None = None,
        file_io_mode: str = "default",
        io_concurrency: int | None = None,
        context: dict[str, Any] | None = None,
        coalesce_gap: int = 4096,
    ) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
        if file_io_mode not in _FILE_IO_MODES:
            raise ValueError(f"file_io_mode must be one of {_FILE_IO_MODES}, got {file_io_mode!r}")
        if io_concurrency is not None and (
            isinstance(io_concurrency, bool) or int(io_concurrency) < 1
        ):
            raise ValueError(
                f"io_concurrency must be None or an integer >= 1, got {io_concurrency!r}"
            )
        if not (multimodal is None or isinstance(multimodal, bool)):
            raise ValueError(f"multimodal must be None, True or False, got {multimodal!r}")
        if isinstance(coalesce_gap, bool) or int(coalesce_gap) < 0:
            raise ValueError(f"coalesce_gap must be an integer >= 0, got {coalesce_gap!r}")
        if context is not None and not isinstance(context, dict):
            raise ValueError(
                f"context must be a TensorStore context spec dict, got {type(context).__name__}"
            )
        self._prefix: str | dict = (
            copy.deepcopy(prefix) if isinstance(prefix, dict) else os.fspath(prefix)
        )
        self._location = _location.resolve(self._prefix)
        if backend == "auto":
            backend = "mmap" if self._location.local_prefix is not None else "tensorstore"
        if backend == "mmap" and self._location.local_prefix is None:
            raise ValueError(f"backend='mmap' needs a local prefix, got {self._location.display!r}")
        self._backend = backend
        self._multimodal = multimodal
        self._file_io_mode = file_io_mode
        self._io_concurrency = None if io_concurrency is None else int(io_concurrency)
        self._context_spec = copy.deepcopy(context)
        self._coalesce_gap = int(coalesce_gap)
        self._lock = threading.Lock()
        self._state: _Handles | None = None
        self._meta: tuple[str, int, int, int] | None = None
        self._fingerprint: str | None = None
        self._handles()  # open eagerly so that bad files fail at construction

    # ---------------------------------------------------------------------------------- metadata

    @property
    def prefix(self) -> str:
        """The dataset prefix as given (display form for spec dicts)."""
        return self._location.display

    @property
    def backend(self) -> str:
        """The resolved backend, "mmap" or "tensorstore"."""
        return self._backend

    @property
    def dtype(self) -> np.dtype:
        """Token dtype."""
        return self._handles().arrays.dtype

    @property
    def sequence_lengths(self) -> np.ndarray:
        """int32[N] tokens per sequence (read-only view)."""
        return self._handles().arrays.sequence_lengths

    @property
    def sequence_pointers(self) -> np.ndarray:
        """int64[N] byte offset of each sequence in the `.bin` (read-only view)."""
        return self._handles().arrays.sequence_pointers

    @property
    def document_indices(self) -> np.ndarray:
        """int64[D+1] first sequence of each document, ending with N (read-only view)."""
        return self._handles().arrays.document_indices

    @property
    def sequence_modes(self) -> np.ndarray | None:
        """int8[N] per-sequence modes of multimodal data, else None."""
        return self._handles().arrays.sequence_modes

    @property
    def num_documents(self) -> int:
        """Number of documents D."""
        return self._handles().arrays.document_indices.shape[0] - 1

    @property
    def num_tokens(self) -> int:
        """Total tokens in the `.bin`."""
        return self._handles().arrays.num_tokens

    @property
    def fingerprint(self) -> str:
        """Content identity: blake2b-128 (hex) of the `.idx` bytes and the `.bin` size.

        Independent of the path and backend; computed once and cached (also across pickling).
        """
        if self._fingerprint is None:
            h = self._handles()
            digest = hashlib.blake2b(digest_size=16, person=b"jaxblend.idx.v1")
            view = memoryview(h.idx_buffer)
            for lo in range(0, len(view), _HASH_CHUNK):
                digest.update(view[lo : lo + _HASH_CHUNK])
            view.release()
            digest.update(h.bin_size.to_bytes(8, "little"))
            self._fingerprint = digest.hexdigest()
        return self._fingerprint

    def __len__(self) -> int:
        return self._handles().arrays.sequence_lengths.shape[0]

    def __repr__(self) -> str:
        dtype, n, d, _ = self._meta if self._meta else ("?", -1, -1, -1)
        return (
            f"IndexedDataset(prefix={self._location.display!r}, backend={self._backend!r}, "
            f"dtype={np.dtype(dtype) if dtype != '?' else dtype}, sequences={n}, documents={d})"
        )

    # -------------------------------------------------------------------------------------- reads

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Returns tokens `[offset, offset + length)` of sequence `i` (a fresh array).

        Args:
            i: sequence index; negative values count from the end.
            offset: first token within the sequence.
            length: number of tokens; None for the rest of the sequence.

        Returns:
            1-D array of `dtype`.

        Raises:
            IndexError: if `i` or the token range is out of bounds.
        """
        h = self._handles()
        arrays = h.arrays
        n = arrays.sequence_lengths.shape[0]
        i = operator.index(i)
        if not -n <= i < n:
            raise IndexError(
                f"sequence index {i} out of range for {n} sequences in {self._location.display}"
            )
        i %= n
        seq_len = int(arrays.sequence_lengths[i])
        offset = operator.index(offset)
        length = seq_len - offset if length is None else operator.index(length)
        if offset < 0 or length < 0 or offset + length > seq_len:
            raise IndexError(
                f"token range offset={offset}, length={length} (end {offset + length}) outside sequence {i} "
                f"of length {seq_len} in {self._location.display}"
            )
        start = int(arrays.sequence_pointers[i]) // arrays.dtype.itemsize + offset
        if h.bin_tokens is not None:
            return np.array(h.bin_tokens[start : start + length])
        out = np.empty(length, dtype=arrays.dtype)
        self._read_ranges(h, np.array([start], np.int64), np.array([length], np.int64), out)
        return out

    def get_many(
        self,
        indices: Any,
        offsets: Any = None,
        lengths: Any = None,
    ) -> list[np.ndarray]:
        """Reads several sequences (or token ranges of them) in one batched storage call.

        Args:
            indices: k sequence indices (negative values count from the end).
            offsets: k token offsets within the sequences (default 0).
            lengths: k token counts (default: to the end of each sequence).

        Returns:
            k arrays (views into one freshly allocated buffer), in the order requested.

        Raises:
            IndexError: if an index or token range is out of bounds.
            ValueError: if the argument shapes disagree.
        """
        arrays = self._handles().arrays
        n = arrays.sequence_lengths.shape[0]
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        k = idx.shape[0]
        bad = np.flatnonzero((idx < -n) | (idx >= n))
        if bad.size:
            raise IndexError(
                f"sequence index {int(idx[bad[0]])} (position {int(bad[0])}) out of range for {n} "
                f"sequences in {self._location.display}"
            )
        idx = np.where(idx < 0, idx + n, idx)
        seq_len = arrays.sequence_lengths[idx].astype(np.int64)
        offs = _vector(offsets, k, "offsets", 0)
        lens = seq_len - offs if lengths is None else _vector(lengths, k, "lengths", 0)
        bad = np.flatnonzero((offs < 0) | (lens < 0) | (offs + lens > seq_len))
        if bad.size:
            j = int(bad[0])
            raise IndexError(
                f"token range offset={int(offs[j])}, length={int(lens[j])} (position {j}) outside sequence "
                f"{int(idx[j])} of length {int(seq_len[j])} in {self._location.display}"
            )
        starts = arrays.sequence_pointers[idx] // arrays.dtype.itemsize + offs
        flat = self.read_token_spans(starts, lens)
        return np.split(flat, np.cumsum(lens)[:-1]) if k else []

    def read_token_spans(self, starts: Any, counts: Any) -> np.ndarray:
        """Reads k token spans of the `.bin` with one batched storage call (the loader hot path).

        Args:
            starts: int64[k] token offsets into the `.bin` (any order; may overlap or repeat).
            counts: int64[k] token counts.

        Returns:
            1-D array of `dtype`: the k spans concatenated in the order given.

        Raises:
            IndexError: if a span leaves the `.bin`.
            ValueError: if the shapes disagree.
        """
        h = self._handles()
        s = np.ascontiguousarray(starts, dtype=np.int64).reshape(-1)
        c = np.ascontiguousarray(counts, dtype=np.int64).reshape(-1)
        if s.shape != c.shape:
            raise ValueError(
                f"starts and counts must have the same length, got {s.shape[0]} and {c.shape[0]}"
            )
        total_tokens = h.arrays.num_tokens
        bad = np.flatnonzero((s < 0) | (c < 0) | (s > total_tokens - c))
        if bad.size:
            j = int(bad[0])
            raise IndexError(
                f"token span start={int(s[j])}, count={int(c[j])} (position {j}) outside the "
                f"{total_tokens} tokens of {self._location.file_name('.bin')}"
            )
        out = np.empty(int(c.sum()), dtype=h.arrays.dtype)
        if h.bin_tokens is not None:
            _gather.gather_spans(h.bin_tokens, s, c, out)
        else:
            self._read_ranges(h, s, c, out)
        return out

    # ----------------------------------------------------------------------------- housekeeping

    @staticmethod
    def exists(prefix: str | os.PathLike | dict) -> bool:
        """Whether both `prefix.idx` and `prefix.bin` exist (see `exists`)."""
        return exists(prefix)

    def close(self) -> None:
        """Releases file handles and maps; the next access reopens them. Arrays obtained from the
        index properties must not be used after closing."""
        with self._lock:
            state, self._state = self._state, None
        if state is not None:
            _release(state)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "prefix": self._prefix,
            "backend": self._backend,
            "multimodal": self._multimodal,
            "file_io_mode": self._file_io_mode,
            "io_concurrency": self._io_concurrency,
            "context": self._context_spec,
            "coalesce_gap": self._coalesce_gap,
            "meta": self._meta,
            "fingerprint": self._fingerprint,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._prefix = state["prefix"]
        self._location = _location.resolve(self._prefix)
        self._backend = state["backend"]
        self._multimodal = state["multimodal"]
        self._file_io_mode = state["file_io_mode"]
        self._io_concurrency = state["io_concurrency"]
        self._context_spec = state["context"]
        self._coalesce_gap = state["coalesce_gap"]
        self._meta = state["meta"]
        self._fingerprint = state["fingerprint"]
        self._lock = threading.Lock()
        self._state = None

    # ------------------------------------------------------------------------------ internals

    def _handles(self) -> _Handles:
        state = self._state
        if state is not None:
            return state
        with self._lock:
            if self._state is None:
                self._state = self._open()
            return self._state

    def _open(self) -> _Handles:
        loc = self._location
        idx_name, bin_name = loc.file_name(".idx"), loc.file_name(".bin")
        kv: ts.KvStore | None = None
        if loc.local_prefix is None or self._backend == "tensorstore":
            kv = _open_kvstore(loc, self._context())
        if loc.local_prefix is not None:
            idx_buffer = _map_local(loc.local_prefix + ".idx", idx_name, "index")
        else:
            assert kv is not None
            idx_buffer = _read_whole(kv, loc.idx_key, idx_name)
        arrays = idx_format.parse_index(idx_buffer, idx_name, multimodal=self._multimodal)
        bin_tokens: np.ndarray | None = None
        bin_mmap: mmap.mmap | None = None
        if loc.local_prefix is not None:
            bin_size = _local_size(loc.local_prefix + ".bin", bin_name)
            idx_format.check_bin_size(arrays, bin_size, idx_name, bin_name)
            if self._backend == "mmap":
                if bin_size:
                    bin_mmap = _map_local(loc.local_prefix + ".bin", bin_name, "data")
                    bin_tokens = np.frombuffer(bin_mmap, dtype=arrays.dtype)
                else:
                    bin_tokens = np.zeros(0, dtype=arrays.dtype)
        else:
            assert kv is not None
            expected = arrays.num_tokens * arrays.dtype.itemsize
            bin_size = _remote_size_check(kv, loc.bin_key, expected, bin_name, idx_name)
        meta = (
            arrays.dtype.str,
            arrays.sequence_lengths.shape[0],
            arrays.document_indices.shape[0] - 1,
            bin_size,
        )
        if self._meta is not None and self._meta != meta:
            raise IndexFormatError(
                f"{idx_name}: the dataset changed since this object was created "
                f"(dtype, sequences, documents, bin bytes) {self._meta} -> {meta}"
            )
        self._meta = meta
        return _Handles(arrays, idx_buffer, bin_size, bin_tokens, bin_mmap, kv)

    def _context(self) -> ts.Context:
        spec: dict[str, Any] = {"file_io_mode": {"mode": self._file_io_mode}}
        if self._io_concurrency is not None:
            limit = {"limit": self._io_concurrency}
            spec.update(
                file_io_concurrency=limit,
                gcs_request_concurrency=limit,
                s3_request_concurrency=limit,
            )
        if self._context_spec:
            spec.update(copy.deepcopy(self._context_spec))
        return ts.Context(ts.Context.Spec(spec), _location.shared_context())

    def _read_ranges(
        self, h: _Handles, starts: np.ndarray, counts: np.ndarray, out: np.ndarray
    ) -> None:
        """TensorStore path: sorted, coalesced byte ranges in one ts.Batch, scattered into `out`."""
        assert h.kvstore is not None
        itemsize = h.arrays.dtype.itemsize
        dst = np.cumsum(counts) - counts  # token offset of each span in `out`
        keep = np.flatnonzero(counts > 0)
        if keep.size == 0:
            return
        order = keep[np.argsort(starts[keep], kind="stable")]
        b0 = starts[order] * itemsize
        b1 = b0 + counts[order] * itemsize
        reach = np.maximum.accumulate(b1)
        new_group = np.empty(order.shape[0], dtype=bool)
        new_group[0] = True
        new_group[1:] = b0[1:] > reach[:-1] + self._coalesce_gap
        heads = np.flatnonzero(new_group)
        g_lo = b0[heads]
        g_hi = np.maximum.reduceat(b1, heads)
        key = self._location.bin_key
        with ts.Batch() as batch:
            futures = [
                h.kvstore.read(key, byte_range=slice(lo, hi), batch=batch)
                for lo, hi in zip(g_lo.tolist(), g_hi.tolist())
            ]
        group_of = np.cumsum(new_group) - 1
        buffers = []
        for fut, lo, hi in zip(futures, g_lo.tolist(), g_hi.tolist()):
            res = fut.result()
            value = res.value
            if res.state != "value" or len(value) != hi - lo:
                raise IndexFormatError(
                    f"{self._location.file_name('.bin')}: read of bytes [{lo}, {hi}) returned "
                    f"{res.state} with {len(value)} bytes; the file changed or vanished"
                )
            buffers.append(value)
        _gather.scatter_from_buffers(
            buffers,
            group_of,
            b0 - g_lo[group_of],
            b1 - b0,
            dst[order] * itemsize,
            out.view(np.uint8),
        )


def exists(prefix: str | os.PathLike | dict) -> bool:
    """Returns whether both `prefix.idx` and `prefix.bin` exist (any accepted prefix form).

    Args:
        prefix: dataset prefix.

    Returns:
        True if both files exist.
    """
    loc = _location.resolve(prefix)
    if loc.local_prefix is not None:
        return os.path.isfile(loc.local_prefix + ".idx") and os.path.isfile(
            loc.local_prefix + ".bin"
        )
    kv = _open_kvstore(loc, _location.shared_context())
    with ts.Batch() as batch:
        futures = [
            kv.read(key, byte_range=slice(0, 0), batch=batch) for key in (loc.idx_key, loc.bin_key)
        ]
    return all(f.result().state == "value" for f in futures)


# ----------------------------------------------------------------------------------- helpers


def _vector(values: Any, k: int, name: str, default: int) -> np.ndarray:
    if values is None:
        return np.full(k, default, dtype=np.int64)
    arr = np.asarray(values, dtype=np.int64).reshape(-1)
    if arr.shape[0] != k:
        raise ValueError(f"{name} has {arr.shape[0]} entries, expected {k} (one per index)")
    return arr


def _open_kvstore(loc: _location.Location, context: ts.Context) -> ts.KvStore:
    try:
        return ts.KvStore.open(loc.kvstore, context=context).result()
    except ValueError as e:
        raise IndexFormatError(f"{loc.display}: cannot open the kvstore {loc.kvstore}: {e}") from e


def _map_local(path: str, name: str, what: str) -> mmap.mmap | bytes:
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        raise IndexFormatError(f"{name}: {what} file does not exist") from None
    except IsADirectoryError:
        raise IndexFormatError(f"{name}: {what} file is a directory") from None


def _local_size(path: str, name: str) -> int:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise IndexFormatError(f"{name}: data file does not exist") from None
    return st.st_size


def _read_whole(kv: ts.KvStore, key: str, name: str) -> bytes:
    res = kv.read(key).result()
    if res.state != "value":
        raise IndexFormatError(f"{name}: index file does not exist")
    return res.value


def _remote_size_check(
    kv: ts.KvStore, key: str, expected: int, bin_name: str, idx_name: str
) -> int:
    """Checks a remote `.bin` is exactly `expected` bytes with two 1-byte reads; returns the size."""
    with ts.Batch() as batch:
        last = kv.read(key, byte_range=slice(max(expected - 1, 0), expected), batch=batch)
        beyond = kv.read(key, byte_range=slice(expected, expected + 1), batch=batch)
    try:
        res = last.result()
    except ValueError as e:
        actual = _size_from_error(e)
        raise IndexFormatError(
            f"{bin_name}: data file is {actual if actual is not None else 'fewer than'} bytes but "
            f"{idx_name} implies {expected} bytes; the pair is truncated or mismatched"
        ) from None
    if res.state != "value":
        raise IndexFormatError(f"{bin_name}: data file does not exist")
    try:
        beyond.result()
    except ValueError:
        return expected
    try:
        kv.read(key, byte_range=slice(1 << 62, (1 << 62) + 1)).result()
        actual_text = "more than"
    except ValueError as e:
        actual = _size_from_error(e)
        actual_text = str(actual) if actual is not None else "more than"
    raise IndexFormatError(
        f"{bin_name}: data file is {actual_text} bytes but {idx_name} implies {expected} bytes; "
        "the pair is truncated or mismatched"
    )


def _size_from_error(e: Exception) -> int | None:
    m = _SIZE_IN_ERROR.search(str(e))
    return int(m.group(1)) if m else None


def _release(state: _Handles) -> None:
    state.bin_tokens = None
    state.arrays = None  # type: ignore[assignment]
    for mm in (state.bin_mmap, state.idx_buffer):
        if isinstance(mm, mmap.mmap):
            # Views handed out earlier keep the map alive until they are collected.
            with contextlib.suppress(BufferError):
                mm.close()

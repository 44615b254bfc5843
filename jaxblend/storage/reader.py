"""Reads IndexedDataset files (`prefix.bin` + `prefix.idx`) through TensorStore or a local mmap.

`IndexedDataset` is the storage layer's reader. The `.bin` is never read whole: token spans are
fetched by byte range.

Backends (`DataAccess.backend`):
* `"mmap"`: local files only; the `.idx` and `.bin` are memory-mapped and spans are gathered by a
  compiled kernel. Fastest on a local disk.
* `"tensorstore"`: any kvstore TensorStore supports (file, gs://, s3://, memory://); the spans of
  one call are sorted, coalesced (ranges closer than `ObjectStoreOptions.coalesce_gap` bytes
  merge) and issued together on one `ts.Batch`.
* `"auto"` (default): `"mmap"` for local prefixes, `"tensorstore"` otherwise.

Opening a remote dataset is a few small requests, not a download (`_open`; docs/object_stores.md,
"Opening a dataset"). Every read option (backend, object-store endpoints, retries, concurrency,
coalescing, timeouts) comes from the one `DataAccess` a dataset is opened with. Prefix forms:
`object_store.location`. Objects pickle as their prefix and options; file handles reopen lazily
(under a lock) in each process, and a dataset whose files changed in between is refused.

This module holds the reader's public face: Megatron-Core's (`dataset[i]`, `dataset[i:j]`,
`get(i, offset, length)`, `len`, `sequence_lengths`, `document_indices`, `sequence_modes`), the
metadata and pickling. Every read goes through the package's one token reader,
`token_reader.TokenReader`, given the `.bin` token offsets the `.idx` pointers say.

Cost contract: opening a local dataset costs O(N) to validate the index (vectorized, blockwise);
`get` and `dataset[i]` cost one bounds check plus the bytes read. Batches of spans (a loader's
hot path) are read with one `TokenReader.read` call (`sequence_spans.SequenceSpans` in sequence
units), not `get` in a loop.
"""

from __future__ import annotations

import copy
import dataclasses
import operator
import os
import threading
from typing import Any

import numpy as np

from jaxblend import access as access_lib
from jaxblend.access import ObjectStoreOptions
from jaxblend.storage import _open
from jaxblend.storage import dataset_identity as _identity
from jaxblend.storage._open import Handles, open_kvstore, release
from jaxblend.storage._prefix_hint import missing_prefix_hint, suffix_hint
from jaxblend.storage.idx_format import IndexArrays, IndexFormatError
from jaxblend.storage.object_store import location as _location
from jaxblend.storage.object_store import requests as _remote
from jaxblend.storage.token_reader import BinDataset, TokenReader, reader_context


class IndexedDataset:
    """A read-only Megatron-Core IndexedDataset.

    Thread-safe and picklable; see the module docstring for backends and prefix forms.

    Args:
        prefix: dataset prefix: local path, `file://`/`gs://`/`s3://`/`memory://` URL, or kvstore
            spec dict whose "path" ends with the file prefix.
        multimodal: None to detect sequence modes from the `.idx` length; True to require them;
            False to ignore them.
        access: how data is reached (`jaxblend.access.DataAccess`), the one source of every read
            option: its `backend` ("auto", "mmap" for local files only, "tensorstore"), its
            object-store options (endpoints, retries, concurrency, coalescing, timeouts) and its
            identity memo; kept when the dataset is pickled (default: `DataAccess.from_env()`,
            evaluated once here).

    Raises:
        ValueError: on an invalid option or prefix.
        IndexFormatError: if a file is missing or malformed, or the pair disagrees.
        ObjectStoreError: if the object store fails or does not answer in time.
    """

    def __init__(
        self,
        prefix: str | os.PathLike | dict,
        *,
        multimodal: bool | None = None,
        access: access_lib.DataAccess | None = None,
    ) -> None:
        if access is None:
            access = access_lib.DataAccess.from_env()
        elif not isinstance(access, access_lib.DataAccess):
            raise TypeError(f"access must be a DataAccess, got {type(access).__name__}")
        if not (multimodal is None or isinstance(multimodal, bool)):
            raise ValueError(f"multimodal must be None, True or False, got {multimodal!r}")
        self._prefix = copy.deepcopy(prefix) if isinstance(prefix, dict) else os.fspath(prefix)
        self._multimodal = multimodal
        self._access = access
        self._start()
        local = self._location.local_prefix is not None
        if access.backend == "mmap" and not local:
            raise ValueError(f"backend='mmap' needs a local prefix, got {self._location.display!r}")
        if access.backend == "auto":
            self._access = dataclasses.replace(access, backend="mmap" if local else "tensorstore")
        self._meta: tuple[str, int, int, int] | None = None
        self._versions: tuple[bytes, bytes] | None = None  # file versions seen at the first open
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
        return self._access.backend

    @property
    def is_remote(self) -> bool:
        """Whether the files are read from an object store (not the local filesystem)."""
        return self._location.local_prefix is None

    @property
    def access(self) -> access_lib.DataAccess:
        """How this dataset is reached (its backend resolved: "mmap" or "tensorstore")."""
        return self._access

    @property
    def object_store(self) -> ObjectStoreOptions:
        """The object-store settings this dataset reads with."""
        return self._access.object_store

    @property
    def bin_dataset(self) -> BinDataset:
        """What the token reader needs of this dataset's `.bin`: its prefix, token dtype, size and
        the version it was opened at (object generation, or local version stamp)."""
        h = self._handles()
        return BinDataset(self.prefix, h.header.dtype.str, h.bin_size, h.bin_generation or None)

    @property
    def dtype(self) -> np.dtype:
        """Token dtype."""
        return self._handles().header.dtype

    @property
    def sequence_lengths(self) -> np.ndarray:
        """int32[N] tokens per sequence (read-only view)."""
        return self._arrays().sequence_lengths

    @property
    def sequence_pointers(self) -> np.ndarray:
        """int64[N] byte offset of each sequence in the `.bin` (read-only view)."""
        return self._arrays().sequence_pointers

    @property
    def document_indices(self) -> np.ndarray:
        """int64[D+1] first sequence of each document, ending with N (read-only view)."""
        return self._arrays().document_indices

    @property
    def sequence_modes(self) -> np.ndarray | None:
        """int8[N] per-sequence modes of multimodal data, else None."""
        return self._arrays().sequence_modes

    @property
    def num_documents(self) -> int:
        """Number of documents D."""
        return self._handles().header.document_count - 1

    @property
    def num_tokens(self) -> int:
        """Total tokens in the `.bin`."""
        return self._handles().num_tokens

    @property
    def fingerprint(self) -> str:
        """Content identity: blake2b-128 (hex) of the `.idx` bytes, the `.bin` size and the `.bin`
        content digest, so changed tokens change it even at the same size (docs/format.md,
        "Fingerprint").

        Independent of the path and backend (disk and bucket copies agree); computed once and
        cached (also across pickling). For a file version seen before (`identity_memo`), taken from
        the memo: no `.idx` download and no `.bin` read.

        Raises:
          IndexFormatError: if a file changed while it was being hashed.
        """
        if self._fingerprint is None:
            self._arrays()
            self._fingerprint = _identity.fingerprint(self._location, self._handles(), self._access)
        return self._fingerprint

    def __len__(self) -> int:
        return self._handles().header.sequence_count

    def __repr__(self) -> str:
        dtype, n, d, _ = self._meta if self._meta else ("?", -1, -1, -1)
        return (
            f"IndexedDataset(prefix={self._location.display!r}, backend={self.backend!r}, "
            f"dtype={np.dtype(dtype) if dtype != '?' else dtype}, sequences={n}, documents={d})"
        )

    # -------------------------------------------------------------------------------------- reads

    def __getitem__(self, idx: int | np.integer | slice) -> Any:
        """Megatron-Core's `IndexedDataset.__getitem__`.

        `dataset[i]` is sequence i (negative i counts from the end); `dataset[i:j]` the list of
        sequences i..j-1, read with one call (Megatron's quirk kept: an empty slice gives one
        empty array). With sequence modes (multimodal data) the result is `(tokens, mode)`, or
        `(sequences, modes)` for a slice.

        Raises:
            IndexError: if `i` is out of range.
            ValueError: on a slice with a step other than 1.
            TypeError: on any other index type.
        """
        modes = self.sequence_modes
        if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
            tokens = self.get(idx)
            return tokens if modes is None else (tokens, modes[idx])
        if isinstance(idx, slice):
            start, stop, step = idx.indices(len(self))
            if step != 1:
                raise ValueError("Slices into indexed_dataset must be contiguous")
            ids = np.arange(start, max(start, stop), dtype=np.int64)
            lengths = self.sequence_lengths[ids].astype(np.int64)
            sequences = np.split(self._read(ids, np.zeros_like(ids), lengths), np.cumsum(lengths)[:-1])
            return sequences if modes is None else (sequences, modes[idx])
        raise TypeError(f"Unexpected type received for idx: {type(idx)}")

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Returns tokens `[offset, offset + length)` of sequence `i` (a fresh array); Megatron's
        signature, without the sequence mode (`dataset[i]` has it).

        Args:
            i: sequence index; negative values count from the end.
            offset: first token within the sequence.
            length: number of tokens; None for the rest of the sequence.

        Returns:
            1-D array of `dtype`.

        Raises:
            IndexError: if `i` or the token range is out of bounds.
        """
        arrays = self._arrays()
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
        span = np.array([i, offset, length], np.int64)
        return self._read(span[0:1], span[1:2], span[2:3], length)

    def _read(
        self, sequences: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, total: int | None = None
    ) -> np.ndarray:
        """Token spans of this dataset's sequences (checked by the caller; `total` tokens),
        concatenated, read through this dataset's `TokenReader`."""
        reader = self._reader
        if reader is None:
            with self._lock:
                if self._reader is None:
                    self._reader = TokenReader([self.bin_dataset], self._access)
                reader = self._reader
        arrays = self._arrays()
        out = np.empty(int(lengths.sum()) if total is None else total, dtype=arrays.dtype)
        starts = arrays.sequence_pointers[sequences] // arrays.dtype.itemsize + offsets
        if sequences.shape[0] == 1:
            reader.read(_ZERO, starts, lengths, out, _ZERO)
        else:
            reader.read(
                np.zeros(sequences.shape[0], np.int64), starts, lengths, out,
                np.cumsum(lengths) - lengths,
            )
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
            self._reader = None  # its kernel arguments hold the maps
        if state is not None:
            release(state)

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _PICKLED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._start()

    def _start(self) -> None:
        """This process's state of the dataset: its location resolved, nothing open yet."""
        self._location = _location.resolve(self._prefix, self._access.object_store)
        self._lock = threading.Lock()
        self._state: Handles | None = None
        self._reader: TokenReader | None = None  # this dataset's read path, built on first read

    # ------------------------------------------------------------------------------ internals

    def _handles(self) -> Handles:
        state = self._state
        if state is not None:
            return state
        with self._lock:
            if self._state is None:
                self._state = self._open()
            return self._state

    def _arrays(self) -> IndexArrays:
        """The decoded `.idx` (fetched and validated on first use for remote datasets)."""
        h = self._handles()
        if h.arrays is None:
            with self._lock:
                if h.arrays is None:
                    _open.load_index(h, self._location, self._access, self._multimodal)
        assert h.arrays is not None
        return h.arrays

    def _open(self) -> Handles:
        """Opens the files in this process; refuses a dataset that changed since creation."""
        loc = self._location
        if loc.local_prefix is None:
            kv = open_kvstore(loc, reader_context(self._access.object_store))
            h, known_fingerprint = _open.open_remote(loc, kv, self._access, self._multimodal)
        else:
            h, known_fingerprint = _open.open_local(loc, self._access, self._multimodal)
        self._fingerprint = self._fingerprint or known_fingerprint
        meta = (
            h.header.dtype.str, h.header.sequence_count, h.header.document_count - 1, h.bin_size
        )
        if self._meta is not None and self._meta != meta:
            raise IndexFormatError(
                f"{loc.file_name('.idx')}: the dataset changed since this object was created "
                f"(dtype, sequences, documents, bin bytes) {self._meta} -> {meta}"
            )
        versions = (h.idx_generation, h.bin_generation)
        if self._versions is not None and self._versions != versions:
            raise IndexFormatError(
                f"{loc.file_name('.bin')}: the dataset was rewritten since this object was created "
                "(same sizes, new file versions); open it again to use the new contents"
            )
        self._meta, self._versions = meta, versions
        return h


def exists(prefix: str | os.PathLike | dict, object_store: ObjectStoreOptions | None = None) -> bool:
    """Returns whether both `prefix.idx` and `prefix.bin` exist (any accepted prefix form; see
    `check_exists`).

    Raises:
        ObjectStoreError: if the store fails or does not answer in time.
    """
    try:
        check_exists(prefix, object_store)
    except IndexFormatError:
        return False
    return True


def check_exists(prefix: str | os.PathLike | dict, object_store: ObjectStoreOptions | None = None) -> None:
    """Refuses a dataset whose `.idx` or `.bin` does not exist, with the line opening it gives.

    Cheaper than opening: a local prefix is two `stat`s, a remote one two empty reads. A file that
    exists but is malformed passes (opening reports it).

    Args:
        prefix: dataset prefix (any accepted form).
        object_store: how a remote prefix is reached (default: `ObjectStoreOptions.from_env()`).

    Raises:
        IndexFormatError: `<prefix>.idx: index file does not exist` with the likely fix (a prefix
            given with its suffix, a preprocessing output prefix without its `_{key}_{level}`
            tail), or `<prefix>.bin: data file does not exist`.
        ObjectStoreError: the store fails or does not answer in time.
    """
    store = object_store if object_store is not None else ObjectStoreOptions.from_env()
    loc = _location.resolve(prefix, store)
    files = ((".idx", "index file"), (".bin", "data file"))
    if loc.local_prefix is not None:
        for suffix, what in files:
            if not os.path.exists(loc.local_prefix + suffix):
                hint = missing_prefix_hint(loc.local_prefix) if suffix == ".idx" else ""
                raise IndexFormatError(f"{loc.file_name(suffix)}: {what} does not exist{hint}")
        return
    kv = open_kvstore(loc, _location.shared_context())
    timeout = store.request_timeout
    futures = [_remote.read(kv, loc.name + suffix, slice(0, 0)) for suffix, _ in files]
    for future, (suffix, what) in zip(futures, files):
        name, key = loc.file_name(suffix), loc.name + suffix
        if _remote.wait(future, name, "checking the files exist", timeout).state != "value":
            hint = suffix_hint(loc.display) if suffix == ".idx" else ""
            raise IndexFormatError(_remote.missing_message(kv, key, name, what, timeout) + hint)


# ----------------------------------------------------------------------------------- helpers


_PICKLED = ("_prefix", "_multimodal", "_access", "_meta", "_versions", "_fingerprint")
_ZERO = np.zeros(1, np.int64)
_ZERO.setflags(write=False)



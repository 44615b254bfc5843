"""Writes IndexedDataset files (`prefix.bin` + `prefix.idx`), byte-identical to Megatron-Core.

`IndexedDatasetBuilder` streams tokens into a temporary `.bin` beside the target, keeps the index
arrays in compact `array.array` columns, and on `finalize()` writes the `.idx` to a temporary name
too, then publishes both with `os.replace`: first any stale `prefix.idx` is removed, then the
`.bin` is moved into place, then the `.idx`. So a `prefix.idx` never exists without its complete `prefix.bin`.

Cost contract: memory is O(number of sequences) (4 bytes per length, 1 per mode, 8 per document);
token bytes go straight to the file through a large write buffer; `merge` copies the other `.bin`
with `os.copy_file_range` in bounded chunks, never holding it in memory.
"""

from __future__ import annotations

import array
import contextlib
import os
import secrets
import shutil
import types
from typing import Any, Self

import numpy as np

from jaxblend.storage import _open, idx_format
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store import location as _location

_WRITE_BUFFER = 8 << 20
_COPY_CHUNK = 64 << 20


def _extend(column: array.array, values: np.ndarray) -> None:
    """Appends integers `values` to an index column (a document's few as Python ints: 4x faster
    than a numpy conversion; many as bytes)."""
    if values.shape[0] < 256:
        column.extend(values.tolist())
    else:
        column.frombytes(np.ascontiguousarray(values, column.typecode).tobytes())


class IndexedDatasetBuilder:
    """Builds a Megatron-Core compatible IndexedDataset at a local prefix.

    Usage::

        with IndexedDatasetBuilder("out/corpus", dtype=np.uint16) as b:
            b.add_document(tokens, lengths=[len(tokens)])
        # finalize() ran on success; abort() on an exception.

    A document is one or more sequences: `add_sequence` (any number of times) then
    `end_document`, or `add_document` with all of a document's tokens and its sequence lengths.

    Args:
        prefix: local path prefix (str, PathLike or `file://` URL); writes `prefix.bin`/`.idx`.
        dtype: token dtype, one of the eight the format knows (see `idx_format`).
        multimodal: store an int8 mode per sequence.

    Raises:
        ValueError: if the prefix is not local, its directory does not exist, or dtype is invalid.
    """

    def __init__(
        self,
        prefix: str | os.PathLike,
        dtype: np.typing.DTypeLike = np.int32,
        *,
        multimodal: bool = False,
    ) -> None:
        self._prefix = _location.local_path(prefix)
        self._dtype = np.dtype(dtype)
        idx_format.dtype_code(self._dtype)  # validates
        self._multimodal = bool(multimodal)
        directory = os.path.dirname(self._prefix)
        if not os.path.isdir(directory):
            raise ValueError(
                f"IndexedDatasetBuilder prefix {prefix!r}: directory {directory!r} does not exist"
            )
        tag = f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
        self._bin_path = self._prefix + ".bin"
        self._idx_path = self._prefix + ".idx"
        self._bin_tmp = self._bin_path + tag
        self._idx_tmp = self._idx_path + tag
        self._bin = open(self._bin_tmp, "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115
        # The index columns: int32 lengths, int8 modes, int64 document indices.
        self._lengths = array.array("i")
        self._modes = array.array("b") if self._multimodal else None
        self._doc_indices = array.array("q", [0])
        self._last_doc_end = 0
        self._num_tokens = 0
        self._state = "open"

    # ----------------------------------------------------------------------------------------- API

    @property
    def dtype(self) -> np.dtype:
        """Token dtype of the dataset being written."""
        return self._dtype

    @property
    def prefix(self) -> str:
        """Absolute local path prefix of the output."""
        return self._prefix

    @property
    def num_sequences(self) -> int:
        """Sequences added so far."""
        return len(self._lengths)

    @property
    def num_documents(self) -> int:
        """Documents ended so far."""
        return len(self._doc_indices) - 1

    @property
    def num_tokens(self) -> int:
        """Tokens written so far."""
        return self._num_tokens

    def add_sequence(self, tokens: Any, mode: int = 0) -> None:
        """Appends one sequence to the current document.

        Args:
            tokens: 1-D array-like of token ids (numpy array, list, CPU torch tensor).
            mode: the sequence's mode (multimodal datasets only; ignored otherwise, as in Megatron).

        Raises:
            ValueError: if tokens are not 1-D, do not fit the dtype, or the mode is not int8.
            RuntimeError: if the builder is finalized or aborted.
        """
        self._check_open()
        arr = self._as_tokens(tokens, "tokens")
        checked_mode = _check_mode(mode) if self._modes is not None else 0
        self._write(arr)
        self._lengths.append(arr.shape[0])
        if self._modes is not None:
            self._modes.append(checked_mode)

    def end_document(self) -> None:
        """Closes the current document (its sequences are those added since the last boundary).

        Raises:
            RuntimeError: if the builder is finalized or aborted.
        """
        self._check_open()
        self._doc_indices.append(len(self._lengths))
        self._last_doc_end = len(self._lengths)

    def add_document(self, tokens: Any, lengths: Any, modes: Any = None) -> None:
        """Appends a whole document: all its tokens and the lengths of its sequences.

        Sequences added with `add_sequence` since the last boundary become part of this document
        (Megatron-Core semantics).

        Args:
            tokens: 1-D array-like, the concatenated tokens of the document's sequences.
            lengths: sequence lengths, summing to `len(tokens)`; may be empty (empty document).
            modes: per-sequence modes for multimodal builders (default all 0).

        Raises:
            ValueError: on inconsistent lengths/modes or tokens that do not fit the dtype.
            RuntimeError: if the builder is finalized or aborted.
        """
        self._check_open()
        arr = self._as_tokens(tokens, "tokens")
        lens = np.asarray(lengths)
        if lens.ndim != 1 or (lens.size and lens.dtype.kind not in "iu"):
            raise ValueError(
                f"lengths must be a 1-D integer sequence, got shape {lens.shape} dtype {lens.dtype}"
            )
        lens = lens.astype(np.int64, copy=False)
        if lens.size and (lens.min() < 0 or lens.max() > np.iinfo(np.int32).max):
            raise ValueError("lengths must lie in [0, 2**31 - 1]")
        if int(lens.sum()) != arr.shape[0]:
            raise ValueError(
                f"lengths sum to {int(lens.sum())} but the document has {arr.shape[0]} tokens"
            )
        mode_arr: np.ndarray | None = None
        if modes is not None:
            if self._modes is None:
                raise ValueError("modes given to a builder created with multimodal=False")
            mode_arr = np.asarray(modes)
            if mode_arr.shape != lens.shape or (mode_arr.size and mode_arr.dtype.kind not in "iu"):
                raise ValueError(
                    f"modes must be {lens.shape[0]} integers, got shape {mode_arr.shape}"
                )
            if mode_arr.size and (mode_arr.min() < -128 or mode_arr.max() > 127):
                raise ValueError("modes must fit int8 ([-128, 127])")
        self._write(arr)
        _extend(self._lengths, lens)
        if self._modes is not None:
            _extend(self._modes, np.zeros(lens.size, np.int8) if mode_arr is None else mode_arr)
        self._doc_indices.append(len(self._lengths))
        self._last_doc_end = len(self._lengths)

    def merge(self, prefix: str | os.PathLike) -> None:
        """Appends every document of another local dataset (Megatron-Core `add_index`).

        Its sequences follow ours, its document boundaries are offset by our sequence count, and its
        `.bin` bytes are copied in chunks. If we are multimodal it must carry modes; if we are not,
        its modes are dropped.

        Args:
            prefix: local prefix (path or `file://` URL) of the dataset to append.

        Raises:
            IndexFormatError: if the other dataset is missing or malformed.
            ValueError: on a dtype mismatch, missing modes, or unfinished sequences of ours.
            RuntimeError: if the builder is finalized or aborted.
        """
        self._check_open()
        self._check_no_pending("merge()")
        loc = _location.resolve(_location.local_path(prefix))
        if loc.local_prefix == self._prefix:
            raise ValueError(f"cannot merge {loc.display!r} into itself")
        _, arrays, bin_size = _open.read_index(loc, self._multimodal)
        if arrays.dtype != self._dtype:
            raise ValueError(
                f"cannot merge {loc.file_name('.idx')} (dtype {arrays.dtype}) into "
                f"{self._idx_path} (dtype {self._dtype})"
            )
        offset = len(self._lengths)
        _extend(self._lengths, arrays.sequence_lengths)
        _extend(self._doc_indices, arrays.document_indices[1:] + offset)
        if self._modes is not None:  # parse_index(multimodal=True) guarantees them
            _extend(self._modes, arrays.sequence_modes)
        del arrays
        self._last_doc_end = len(self._lengths)
        self._bin.flush()
        _copy_file(loc.local_prefix + ".bin", self._bin.raw, bin_size)
        self._bin.seek(0, os.SEEK_END)  # resynchronise the buffered writer with the raw position
        self._num_tokens += bin_size // self._dtype.itemsize

    def finalize(self) -> None:
        """Writes the `.idx` and publishes both files under their final names.

        Raises:
            ValueError: if sequences were added after the last document boundary.
            RuntimeError: if the builder is already finalized or aborted.
        """
        self._check_open()
        self._check_no_pending("finalize()")
        try:
            self._bin.flush()
            os.fsync(self._bin.fileno())
            self._bin.close()
            with open(self._idx_tmp, "wb") as f:
                idx_format.write_index(
                    f, self._dtype, self._lengths, self._doc_indices, self._modes
                )
                f.flush()
                os.fsync(f.fileno())
            if os.path.lexists(self._idx_path):
                os.remove(self._idx_path)
            os.replace(self._bin_tmp, self._bin_path)
            os.replace(self._idx_tmp, self._idx_path)
        except BaseException:
            self.abort()
            raise
        self._state = "finalized"

    def abort(self) -> None:
        """Discards the temporary files; the builder cannot be used afterwards. Idempotent."""
        if self._state == "finalized":
            return
        self._state = "aborted"
        with contextlib.suppress(OSError):
            self._bin.close()
        for path in (self._bin_tmp, self._idx_tmp):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
            return
        try:
            self.finalize()
        except BaseException:
            self.abort()
            raise

    def __del__(self) -> None:
        if getattr(self, "_state", None) == "open":
            self.abort()

    def __repr__(self) -> str:
        return (
            f"IndexedDatasetBuilder(prefix={self._prefix!r}, dtype={self._dtype}, "
            f"multimodal={self._multimodal}, state={self._state!r})"
        )

    # ------------------------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(
                f"IndexedDatasetBuilder for {self._prefix!r} is already {self._state}"
            )

    def _check_no_pending(self, what: str) -> None:
        pending = len(self._lengths) - self._last_doc_end
        if pending:
            raise ValueError(
                f"{what}: {pending} sequence(s) were added after the last end_document(); "
                "call end_document() first"
            )

    def _as_tokens(self, tokens: Any, what: str) -> np.ndarray:
        arr = np.asarray(tokens)  # numpy arrays, lists, CPU torch tensors (`__array__`)
        if arr.ndim != 1:
            raise ValueError(f"{what} must be 1-D, got shape {arr.shape}")
        if arr.dtype == self._dtype:
            return arr
        if arr.size == 0:
            return arr.astype(self._dtype)
        target = self._dtype
        if target.kind in "iu":
            if arr.dtype.kind not in "iub":
                raise ValueError(
                    f"{what} of dtype {arr.dtype} cannot be stored as integer dtype {target}"
                )
            info = np.iinfo(target)
            lo, hi = arr.min(), arr.max()
            if lo < info.min or hi > info.max:
                raise ValueError(
                    f"{what} hold values in [{lo}, {hi}] outside the range of {target} [{info.min}, {info.max}]"
                )
        elif arr.dtype.kind not in "iubf":
            raise ValueError(f"{what} of dtype {arr.dtype} cannot be stored as {target}")
        return arr.astype(target)

    def _write(self, arr: np.ndarray) -> None:
        if arr.size:
            self._bin.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
            self._num_tokens += arr.shape[0]


def _check_mode(mode: Any) -> int:
    if (
        isinstance(mode, bool)
        or not isinstance(mode, (int, np.integer))
        or not -128 <= int(mode) <= 127
    ):
        raise ValueError(f"mode must be an integer in [-128, 127], got {mode!r}")
    return int(mode)


def _copy_file(src_path: str, dst: Any, nbytes: int) -> None:
    """Appends `nbytes` of `src_path` to the raw file `dst` in bounded chunks."""
    with open(src_path, "rb") as src:
        copied = 0
        try:
            while copied < nbytes:
                n = os.copy_file_range(
                    src.fileno(), dst.fileno(), min(_COPY_CHUNK, nbytes - copied)
                )
                if n == 0:
                    break
                copied += n
        except OSError:
            src.seek(copied)
            shutil.copyfileobj(src, dst, _COPY_CHUNK)
            copied = nbytes
        if copied != nbytes:
            raise IndexFormatError(
                f"{src_path}: data file shrank while being merged ({copied} of {nbytes} bytes)"
            )

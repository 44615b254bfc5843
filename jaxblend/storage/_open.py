"""Opens an `IndexedDataset`'s files in one process: `Handles`, what the process has open.

`Handles` holds the parsed `.idx` header, sizes, the `.idx` buffer and arrays, the kvstore of a
remote dataset and the file versions seen; the `.bin` is read by the token reader
(`token_reader.TokenReader`), which maps it ("mmap" backend) or opens a kvstore on the first read.
Nothing here is shared between processes: `IndexedDataset` pickles its `DataAccess` and reopens.

* Local files (`open_local`): the `.idx` memory-mapped and validated, the `.bin` sized.
* Object stores (`open_remote`): a version pair seen before (`identity_memo`) opens with one round
  of two tiny requests (the `.idx` header and an empty read of the `.bin` for its generation);
  the `.idx` arrays are downloaded on first use (`load_index`), which checks that the object was
  not rewritten in between. A version pair seen for the first time is downloaded, validated and
  size-checked at once; its fingerprint then costs one GCS metadata request, or nothing on S3
  (`store_checksums`), and reads no `.bin` bytes unless the store keeps no MD5 for the object (S3
  multipart, GCS composite).
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
import stat
from typing import Any

import numpy as np
import tensorstore as ts

from jaxblend.access import DataAccess
from jaxblend.storage import _mapping, idx_format
from jaxblend.storage import dataset_identity as _identity
from jaxblend.storage._prefix_hint import missing_prefix_hint, suffix_hint
from jaxblend.storage.idx_format import IndexArrays, IndexFormatError
from jaxblend.storage.object_store import location as _location
from jaxblend.storage.object_store import requests as _remote


@dataclasses.dataclass
class Handles:
    """Per-process open state of a dataset."""

    header: idx_format.IndexHeader
    num_tokens: int
    bin_size: int
    kvstore: ts.KvStore | None  # remote datasets: `.idx` reads (tokens: `token_reader`)
    idx_generation: bytes = b""  # file versions seen at open (generations; local: version stamps)
    bin_generation: bytes = b""
    changed_at: float = 0.0  # local: when either file last changed (identity_memo.SETTLE_SECONDS)
    arrays: IndexArrays | None = None  # None until first needed (remote)
    idx_buffer: Any = None  # a read-only map (see _mapping) or bytes; the arrays alias it


def open_kvstore(loc: _location.Location, context: ts.Context) -> ts.KvStore:
    """Opens the kvstore holding `loc`'s files.

    Raises:
      IndexFormatError: the kvstore spec does not open.
    """
    try:
        return _location.open_kvstore(loc.kvstore, context)
    except ValueError as e:
        raise IndexFormatError(f"{loc.display}: cannot open the kvstore {loc.kvstore}: {e}") from e


def release(state: Handles) -> None:
    """Drops the arrays and closes the maps (views handed out earlier keep a map alive)."""
    state.arrays = None
    if isinstance(state.idx_buffer, mmap.mmap):
        with contextlib.suppress(BufferError):
            state.idx_buffer.close()


# ------------------------------------------------------------------------------------ local files


def open_local(
    loc: _location.Location, access: DataAccess, multimodal: bool | None
) -> tuple[Handles, str | None]:
    """Opens the local files of `loc` (which has a `local_prefix`); `multimodal` as
    `idx_format.parse_index`.

    Returns:
      The handles and, for a remembered version pair, its content fingerprint (else None).

    Raises:
      IndexFormatError: a file is missing, a directory, or malformed, or the pair disagrees.
    """
    idx_buffer, arrays, bin_size = read_index(loc, multimodal)
    try:
        idx_version, bin_version, changed_at = _identity.local_versions(loc.local_prefix)
    except OSError as e:
        raise IndexFormatError(f"{loc.file_name('.idx')}: cannot be stat'ed: {e}") from None
    header = idx_format.parse_header(idx_buffer, loc.file_name(".idx"))
    h = Handles(
        header, arrays.num_tokens, bin_size, None, idx_version, bin_version, changed_at, arrays,
        idx_buffer,
    )
    known = _identity.remembered(loc, h, access)
    if known is None or (known.num_tokens, known.bin_size) != (h.num_tokens, bin_size):
        return h, None
    return h, known.fingerprint


def read_index(
    loc: _location.Location, multimodal: bool | None
) -> tuple[np.ndarray | bytes, IndexArrays, int]:
    """Maps and validates the `.idx` of `loc` (which has a `local_prefix`) and checks the `.bin`'s
    size against it; `multimodal` as `idx_format.parse_index`.

    Returns:
      The `.idx` buffer (a read-only map; the arrays alias it), its arrays, the `.bin` size.

    Raises:
      IndexFormatError: a file is missing (with the likely prefix), a directory, or malformed, or
        the pair disagrees.
    """
    idx_name, bin_name = loc.file_name(".idx"), loc.file_name(".bin")
    idx_path = loc.local_prefix + ".idx"
    idx_buffer = _mapping.map_readonly(idx_path) if _size(idx_path, idx_name, loc) else b""
    arrays = idx_format.parse_index(idx_buffer, idx_name, multimodal=multimodal)
    bin_size = _size(loc.local_prefix + ".bin", bin_name)
    idx_format.check_bin_size(arrays, bin_size, idx_name, bin_name)
    return idx_buffer, arrays, bin_size


def _size(path: str, name: str, hint_for: _location.Location | None = None) -> int:
    """The size of an index (`hint_for` its dataset, for the likely prefix when it is missing) or
    data file."""
    what = "data file" if hint_for is None else "index file"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        hint = "" if hint_for is None else missing_prefix_hint(hint_for.local_prefix)
        raise IndexFormatError(f"{name}: {what} does not exist{hint}") from None
    if stat.S_ISDIR(st.st_mode):
        raise IndexFormatError(f"{name}: {what} is a directory")
    return st.st_size


# ---------------------------------------------------------------------------------- object stores


def open_remote(
    loc: _location.Location, kv: ts.KvStore, access: DataAccess, multimodal: bool | None
) -> tuple[Handles, str | None]:
    """Opens the remote files of `loc` through `kv`; `multimodal` as `idx_format.parse_index`.

    Returns:
      The handles and, for a remembered version pair, its content fingerprint (else None).

    Raises:
      IndexFormatError: a file is missing or malformed, or the pair disagrees.
      ObjectStoreError: the store fails or does not answer in time.
    """
    idx_name, bin_name = loc.file_name(".idx"), loc.file_name(".bin")
    timeout = access.object_store.request_timeout
    head_future = _remote.read(kv, loc.idx_key, slice(0, idx_format.HEADER_SIZE))
    bin_future = _remote.read(kv, loc.bin_key, slice(0, 0))
    try:
        head = _remote.wait(head_future, idx_name, "reading the index header", timeout)
    except ValueError:  # shorter than a header: the full read below reports it
        head = None
    if head is not None and head.state != "value":
        raise IndexFormatError(
            _remote.missing_message(kv, loc.idx_key, idx_name, "index file", timeout)
            + suffix_hint(idx_name[: -len(".idx")])
        )
    bin_head = _remote.wait(bin_future, bin_name, "reading the data file", timeout)
    if bin_head.state != "value":
        raise IndexFormatError(
            _remote.missing_message(kv, loc.bin_key, bin_name, "data file", timeout)
        )
    placeholder = idx_format.IndexHeader(np.dtype(np.uint8), 0, 1)  # replaced below
    h = Handles(placeholder, 0, 0, kv, b"", bytes(bin_head.stamp.generation))
    if head is not None:
        h.header = idx_format.parse_header(head.value, idx_name)
        h.idx_generation = bytes(head.stamp.generation)
        known = _identity.remembered(loc, h, access)
        if known is not None and known.num_tokens * h.header.dtype.itemsize == known.bin_size:
            h.num_tokens, h.bin_size = known.num_tokens, known.bin_size
            return h, known.fingerprint
    # First sight of this version pair: download, validate and size-check everything.
    load_index(h, loc, access, multimodal, first_sight=True)
    h.bin_size, _ = _remote.object_size(
        kv, loc.bin_key, h.num_tokens * h.header.dtype.itemsize, bin_name, timeout
    )
    return h, None


def load_index(
    h: Handles,
    loc: _location.Location,
    access: DataAccess,
    multimodal: bool | None,
    first_sight: bool = False,
) -> None:
    """Downloads, decodes and validates the whole `.idx` of a remote dataset into `h`.

    `first_sight`: called from `open_remote` for a version not remembered (the `.bin` size is
    checked afterwards); otherwise the lazy load after a remembered open, which must find the
    object version and the `.bin` size seen at open.
    """
    idx_name = loc.file_name(".idx")
    assert h.kvstore is not None
    res = _remote.read_existing(
        h.kvstore, loc.idx_key, idx_name, "index file", access.object_store.request_timeout
    )
    if h.idx_generation and bytes(res.stamp.generation) != h.idx_generation:
        raise IndexFormatError(
            f"{idx_name}: the index was rewritten while the dataset was being opened; retry"
        )
    h.idx_generation = bytes(res.stamp.generation)
    arrays = idx_format.parse_index(res.value, idx_name, multimodal=multimodal)
    if not first_sight:
        idx_format.check_bin_size(arrays, h.bin_size, idx_name, loc.file_name(".bin"))
    h.header = idx_format.parse_header(res.value, idx_name)
    h.num_tokens = arrays.num_tokens
    h.idx_buffer = res.value
    h.arrays = arrays

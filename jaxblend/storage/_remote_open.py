"""Opens a dataset in an object store with a few small requests; fetches its `.idx` when needed.

A version pair seen before (`identity_memo`) opens with one round of two tiny requests (the `.idx`
header and an empty read of the `.bin` for its generation); the `.idx` arrays are downloaded on
first use (`load_index`), which checks that the object was not rewritten in between. A version
pair seen for the first time is downloaded, validated and size-checked at once; its fingerprint
then costs one GCS metadata request, or nothing on S3 (`store_checksums`), and reads no `.bin`
bytes unless the store keeps no MD5 for the object (S3 multipart, GCS composite).
"""

from __future__ import annotations

import numpy as np
import tensorstore as ts

from jaxblend.access import DataAccess
from jaxblend.storage import dataset_identity as _identity
from jaxblend.storage import idx_format
from jaxblend.storage._handles import Handles
from jaxblend.storage._prefix_hint import suffix_hint
from jaxblend.storage.dataset_identity import memo as identity_memo
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store import location as _location
from jaxblend.storage.object_store import requests as _remote


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
    idx_generation = bytes(head.stamp.generation) if head is not None else b""
    bin_generation = bytes(bin_head.stamp.generation)
    if head is not None:
        header = idx_format.parse_header(head.value, idx_name)
        known = identity_memo.lookup(
            _identity.memo_url(loc), idx_generation, bin_generation,
            options=access.identity_store(), object_store=access.object_store,
        )
        if known is not None and known.num_tokens * header.dtype.itemsize == known.bin_size:
            handles = Handles(
                header, known.num_tokens, known.bin_size, kv, idx_generation, bin_generation
            )
            return handles, known.fingerprint
    # First sight of this version pair: download, validate and size-check everything.
    placeholder = idx_format.IndexHeader(np.dtype(np.uint8), 0, 1)  # replaced by the load
    h = Handles(placeholder, 0, 0, kv, idx_generation, bin_generation)
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

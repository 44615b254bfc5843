"""Dataset identity: what the data of a prefix is, as one content fingerprint.

The one entry point is `dataset_fingerprint(prefix, access)`; an open `IndexedDataset` gives the
same value as its `fingerprint`. The fingerprint hashes the `.idx` bytes, the `.bin` size and the
MD5 of the `.bin` (docs/format.md, "Fingerprint"), so a disk copy and a bucket copy of a dataset
have the same one. It keys index-map caches, publication records and resume states: the value must
never change for the same bytes.

It is found at the cheapest of three levels (docs/object_stores.md, "Opening a dataset"; the costs
are in docs/robustness.md, "Dataset identity"):

1. **memo by version** (`identity_memo`): the fingerprint remembered for this (`.idx` version,
   `.bin` version) pair (object generations; a local file's device, inode, size and times). A
   rewritten file has a new version and misses. Cost: the open's version probes, nothing more.
2. **store checksum** (`store_checksums`): the MD5 the store keeps for the `.bin` version that was
   opened (GCS `md5Hash` from one metadata request, bound to the generation; a single-part S3
   ETag, no request). No `.bin` byte is read.
3. **full read** (`content_digest`): the `.bin` read once, sequentially, and hashed (local files,
   `memory://`, S3 multipart uploads, GCS composite objects). A file that changes meanwhile is
   refused.

Levels 2 and 3 remember their result at level 1. Preprocessing records the fingerprint of what it
writes at level 1 (`jaxblend.preprocess.identity_record`); `content_verify` reads every byte on
request and checks levels 1 and 2 against it.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from jaxblend.access import DataAccess, IdentityStoreOptions, ObjectStoreOptions
from jaxblend.storage import content_digest, identity_memo, store_checksums
from jaxblend.storage._handles import Handles
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store import requests
from jaxblend.storage.object_store.location import Location, Prefix

_HASH_CHUNK = 64 << 20
PERSON = b"jaxblend.idx.v3"  # v3: the `.bin` component is its MD5 (v2: chunked SHA-256)


def dataset_fingerprint(prefix: Prefix, access: DataAccess | None = None) -> str:
    """The content fingerprint of the dataset at `prefix` (local path, URL or kvstore spec).

    The dataset is opened (its files' versions, sizes and `.idx` header checked) and identified at
    the cheapest level that knows it (see the module docstring).

    Args:
      prefix: the dataset prefix.
      access: how it is reached (default `DataAccess.from_env()`).

    Raises:
      IndexFormatError: a file is missing, malformed, or changed while it was identified.
      ObjectStoreError: the store failed or timed out.
    """
    # The reader opens and validates the pair and calls back `fingerprint` below for the handles.
    from jaxblend.storage.reader import IndexedDataset

    dataset = IndexedDataset(prefix, access=access)
    try:
        return dataset.fingerprint
    finally:
        dataset.close()


def memo_url(loc: Location) -> str:
    """The key a dataset is remembered under: its real local path, or its URL."""
    return loc.display if loc.local_prefix is None else os.path.realpath(loc.local_prefix)


def local_versions(prefix: str) -> tuple[bytes, bytes, float]:
    """(`.idx` version, `.bin` version, when either last changed) of a local dataset."""
    idx_version, idx_changed = identity_memo.local_version(prefix + ".idx")
    bin_version, bin_changed = identity_memo.local_version(prefix + ".bin")
    return idx_version, bin_version, max(idx_changed, bin_changed)


def fingerprint(
    loc: Location,
    h: Handles,
    store: ObjectStoreOptions,
    memo: IdentityStoreOptions,
) -> str:
    """Computes the fingerprint of an opened dataset (whose `.idx` is loaded) and remembers it.

    Raises:
      IndexFormatError: if a file changed while it was being hashed.
    """
    began = time.time()
    assert h.arrays is not None
    value = combine(h.idx_buffer, h.bin_size, bytes.fromhex(bin_md5(loc, h, store)))
    if loc.local_prefix is None or began - h.changed_at >= identity_memo.SETTLE_SECONDS:
        identity = identity_memo.Identity(value, h.arrays.num_tokens, h.bin_size)
        identity_memo.record(
            memo_url(loc), h.idx_generation, h.bin_generation, identity,
            options=memo, object_store=store,
        )
    return value


def combine(idx_bytes: Any, bin_size: int, bin_md5: bytes) -> str:
    """The fingerprint (hex) from the `.idx` bytes, the `.bin` size and the `.bin` MD5."""
    digest = hashlib.blake2b(digest_size=16, person=PERSON)
    view = memoryview(idx_bytes)
    for lo in range(0, len(view), _HASH_CHUNK):
        digest.update(view[lo : lo + _HASH_CHUNK])
    view.release()
    digest.update(bin_size.to_bytes(8, "little"))
    digest.update(bin_md5)
    return digest.hexdigest()


def reported_md5(
    loc: Location, h: Handles, store: ObjectStoreOptions
) -> store_checksums.StoreChecksum:
    """What the store reports for the `.bin` version in `h` (no MD5 for local files).

    Raises:
      IndexFormatError: the `.bin` was rewritten since it was opened.
      ObjectStoreError: the metadata request failed.
    """
    if loc.local_prefix is not None:
        return store_checksums.StoreChecksum(None, None, "local file")
    bin_name = loc.file_name(".bin")
    try:
        return store_checksums.reported(loc.kvstore, loc.bin_key, h.bin_generation, bin_name, store)
    except store_checksums.GenerationMismatch as e:
        raise IndexFormatError(str(e)) from None


def bin_md5(loc: Location, h: Handles, store: ObjectStoreOptions) -> str:
    """MD5 (hex) of the `.bin` version in `h`: reported by the store when it keeps one, else read."""
    checksum = reported_md5(loc, h, store)
    if checksum.md5 is not None:
        return checksum.md5.hex()
    return read_md5(loc, h, store)


def read_md5(loc: Location, h: Handles, store: ObjectStoreOptions) -> str:
    """MD5 (hex) of the `.bin` read in full, checking that it is the version seen at open."""
    bin_name = loc.file_name(".bin")
    if loc.local_prefix is not None:
        try:
            value = content_digest.local_file_digest(loc.local_prefix + ".bin", h.bin_size, bin_name)
            after = local_versions(loc.local_prefix)[:2]
        except OSError as e:
            raise IndexFormatError(f"{bin_name}: cannot be read to hash it: {e}") from None
        if after != (h.idx_generation, h.bin_generation):
            raise IndexFormatError(
                f"{bin_name}: the dataset changed while it was being opened; open it again"
            )
        return value
    assert h.kvstore is not None
    kv, timeout = h.kvstore, store.request_timeout

    def finish(future: Any) -> bytes:
        res = requests.wait(future, bin_name, "reading the data file to hash it", timeout)
        if res.state != "value" or bytes(res.stamp.generation) != h.bin_generation:
            raise IndexFormatError(
                f"{bin_name}: the data file was rewritten while it was being opened; open it again"
            )
        return res.value

    return content_digest.streamed_digest(
        h.bin_size, lambda lo, hi: requests.read(kv, loc.bin_key, slice(lo, hi)), finish
    )

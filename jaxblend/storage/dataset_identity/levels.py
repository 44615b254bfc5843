"""The fingerprint of an opened dataset, level by level (see `jaxblend.storage.dataset_identity`).

`fingerprint` is what `IndexedDataset.fingerprint` calls for the handles of an open dataset whose
version pair the memo did not know: the `.bin` MD5 reported by the store (level 2), else read
(level 3), hashed with the `.idx` bytes and the `.bin` size (`combine`), and remembered by version
(level 1, `memo`).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from jaxblend.access import DataAccess, ObjectStoreOptions
from jaxblend.storage._open import Handles
from jaxblend.storage.dataset_identity import content_digest, store_checksums
from jaxblend.storage.dataset_identity import memo as identity_memo
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store import requests
from jaxblend.storage.object_store.location import Location

_HASH_CHUNK = 64 << 20
PERSON = b"jaxblend.idx.v3"  # v3: the `.bin` component is its MD5 (v2: chunked SHA-256)


def memo_url(loc: Location) -> str:
    """The key a dataset is remembered under: its real local path, or its URL."""
    return loc.display if loc.local_prefix is None else os.path.realpath(loc.local_prefix)


def local_versions(prefix: str) -> tuple[bytes, bytes, float]:
    """(`.idx` version, `.bin` version, when either last changed) of a local dataset."""
    idx_version, idx_changed = identity_memo.local_version(prefix + ".idx")
    bin_version, bin_changed = identity_memo.local_version(prefix + ".bin")
    return idx_version, bin_version, max(idx_changed, bin_changed)


def fingerprint(loc: Location, h: Handles, access: DataAccess) -> str:
    """Computes the fingerprint of an opened dataset (whose `.idx` is loaded) and remembers it.

    Raises:
      IndexFormatError: if a file changed while it was being hashed.
    """
    began = time.time()
    value = combine(h.idx_buffer, h.bin_size, bytes.fromhex(bin_md5(loc, h, access.object_store)))
    remember(loc, h, value, began, access)
    return value


def remembered(loc: Location, h: Handles, access: DataAccess) -> identity_memo.Identity | None:
    """The identity remembered for the version pair of `h`, if any."""
    return identity_memo.lookup(
        memo_url(loc), h.idx_generation, h.bin_generation,
        options=access.identity_store(), object_store=access.object_store,
    )


def remember(loc: Location, h: Handles, value: str, began: float, access: DataAccess) -> None:
    """Records `value` as the fingerprint of the version pair in `h`, hashed from `began` (a
    `time.time()`); a local file changed within `identity_memo.SETTLE_SECONDS` before is not."""
    if loc.local_prefix is None or began - h.changed_at >= identity_memo.SETTLE_SECONDS:
        identity_memo.record(
            memo_url(loc), h.idx_generation, h.bin_generation,
            identity_memo.Identity(value, h.num_tokens, h.bin_size),
            options=access.identity_store(), object_store=access.object_store,
        )


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
    return store_checksums.reported(loc.kvstore, loc.bin_key, h.bin_generation, bin_name, store)


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

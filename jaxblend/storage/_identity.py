"""A dataset's content fingerprint: its `.idx` bytes, its `.bin` size and its `.bin` content.

See docs/format.md, "Fingerprint". The `.bin` digest (`content_digest`) is the expensive part: it
reads the whole file once per file version, after which `identity_memo` remembers the result under
the versions recorded in the open handles (local version stamps or object generations).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from jaxblend.access import IdentityStoreOptions, ObjectStoreOptions
from jaxblend.storage import _location, _remote, content_digest, identity_memo
from jaxblend.storage._handles import Handles
from jaxblend.storage.idx_format import IndexFormatError

_HASH_CHUNK = 64 << 20


def memo_url(loc: _location.Location) -> str:
    """The key a dataset is remembered under: its real local path, or its URL."""
    return loc.display if loc.local_prefix is None else os.path.realpath(loc.local_prefix)


def local_versions(prefix: str) -> tuple[bytes, bytes, float]:
    """(`.idx` version, `.bin` version, when either last changed) of a local dataset."""
    idx_version, idx_changed = identity_memo.local_version(prefix + ".idx")
    bin_version, bin_changed = identity_memo.local_version(prefix + ".bin")
    return idx_version, bin_version, max(idx_changed, bin_changed)


def fingerprint(
    loc: _location.Location,
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
    digest = hashlib.blake2b(digest_size=16, person=b"jaxblend.idx.v2")
    view = memoryview(h.idx_buffer)
    for lo in range(0, len(view), _HASH_CHUNK):
        digest.update(view[lo : lo + _HASH_CHUNK])
    view.release()
    digest.update(h.bin_size.to_bytes(8, "little"))
    digest.update(bytes.fromhex(_bin_digest(loc, h, store)))
    value = digest.hexdigest()
    if loc.local_prefix is None or began - h.changed_at >= identity_memo.SETTLE_SECONDS:
        identity = identity_memo.Identity(value, h.arrays.num_tokens, h.bin_size)
        identity_memo.record(
            memo_url(loc), h.idx_generation, h.bin_generation, identity,
            options=memo, object_store=store,
        )
    return value


def _bin_digest(loc: _location.Location, h: Handles, store: ObjectStoreOptions) -> str:
    """`content_digest` of the `.bin`, checking that it is the version seen at open."""
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
        res = _remote.wait(future, bin_name, "reading the data file to hash it", timeout)
        if res.state != "value" or bytes(res.stamp.generation) != h.bin_generation:
            raise IndexFormatError(
                f"{bin_name}: the data file was rewritten while it was being opened; open it again"
            )
        return res.value

    return content_digest.streamed_digest(
        h.bin_size, lambda lo, hi: _remote.read(kv, loc.bin_key, slice(lo, hi)), finish
    )

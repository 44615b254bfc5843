"""Records the identity of the datasets a run wrote, so no later open reads their `.bin` again.

Preprocessing reads each finished `.bin` once anyway (the largest token id,
`manifest.scan_outputs`), and takes its MD5 in the same pass. With it, the dataset's fingerprint
(docs/format.md, "Fingerprint") is known the moment the files are final: it is recorded in the
identity memo (`jaxblend.storage.dataset_identity.memo`) under the versions of the files just
written (the local files' version stamps; for a bucket output, the generations the uploads returned), and the
MD5s go in the run record (``bin_md5``).

The memo's rule of not remembering a local version changed less than `SETTLE_SECONDS` ago guards
against a write landing in the same timestamp tick after the hashing; here the hashing happened
after the run's last write to files only this run writes, and the versions are taken after it, so
the rule is not needed.
"""

from __future__ import annotations

import os

from jaxblend.access import IdentityStoreOptions, ObjectStoreOptions
from jaxblend.storage import idx_format
from jaxblend.storage.dataset_identity import levels, memo
from jaxblend.storage.object_store.location import resolve


def fingerprint_of(prefix: str, bin_md5: str) -> memo.Identity:
    """The identity of the local dataset `prefix` whose `.bin` has MD5 `bin_md5`.

    Raises:
      IndexFormatError: the `.idx` is malformed or does not match the `.bin` size.
    """
    with open(prefix + ".idx", "rb") as f:
        idx_bytes = f.read()
    arrays = idx_format.parse_index(idx_bytes, prefix + ".idx", multimodal=None)
    bin_size = os.path.getsize(prefix + ".bin")
    idx_format.check_bin_size(arrays, bin_size, prefix + ".idx", prefix + ".bin")
    value = levels.combine(idx_bytes, bin_size, bytes.fromhex(bin_md5))
    return memo.Identity(value, arrays.num_tokens, bin_size)


def record_local(
    names: dict[str, str],
    md5s: dict[str, str],
    identity: IdentityStoreOptions,
    object_store: ObjectStoreOptions,
) -> None:
    """Remembers each written local dataset (key -> prefix, its `.bin`'s MD5 in ``md5s``) under
    its current file versions."""
    for key, prefix in names.items():
        versions = levels.local_versions(prefix)[:2]
        found = fingerprint_of(prefix, md5s[key])
        if levels.local_versions(prefix)[:2] == versions:  # else changed meanwhile: the first
            where = levels.memo_url(resolve(prefix))  # open identifies it
            memo.record(where, *versions, found, options=identity, object_store=object_store)


def record_published(
    urls: dict[str, str],
    local_names: dict[str, str],
    md5s: dict[str, str],
    generations: dict[str, tuple[bytes, bytes]],
    identity: IdentityStoreOptions,
    object_store: ObjectStoreOptions,
) -> None:
    """Remembers each uploaded dataset (key -> URL prefix) under the generations its `.idx` and
    `.bin` uploads returned (key -> (idx generation, bin generation)), with the identity of its
    local copy (key -> prefix, its `.bin`'s MD5 in ``md5s``; a key without one is skipped)."""
    for key, url in urls.items():
        if key in md5s:
            found = fingerprint_of(local_names[key], md5s[key])
            where = levels.memo_url(resolve(url))
            memo.record(where, *generations[key], found, options=identity, object_store=object_store)


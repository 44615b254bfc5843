"""Dataset identity: what the data of a prefix is, as one content fingerprint.

The one entry point is `dataset_fingerprint(prefix, access)`; an open `IndexedDataset` gives the
same value as its `fingerprint`. The fingerprint hashes the `.idx` bytes, the `.bin` size and the
MD5 of the `.bin` (docs/format.md, "Fingerprint"), so a disk copy and a bucket copy of a dataset
have the same one. It keys index-map caches, publication records and resume states: the value must
never change for the same bytes.

It is found at the cheapest of three levels (docs/object_stores.md, "Opening a dataset"; the costs
are in docs/robustness.md, "Dataset identity"):

1. **memo by version** (`memo`): the fingerprint remembered for this (`.idx` version,
   `.bin` version) pair (object generations; a local file's device, inode, size and times). A
   rewritten file has a new version and misses. Cost: the open's version probes, nothing more.
2. **store checksum** (`store_checksums`): the MD5 the store keeps for the `.bin` version that was
   opened (GCS `md5Hash` from one metadata request, bound to the generation; a single-part S3
   ETag, no request). No `.bin` byte is read.
3. **full read** (`content_digest`): the `.bin` read once, sequentially, and hashed (local files,
   `memory://`, S3 multipart uploads, GCS composite objects). A file that changes meanwhile is
   refused.

Levels 2 and 3 remember their result at level 1. Preprocessing records the fingerprint of what it
writes at level 1 (`jaxblend.preprocess.identity_record`); `verify` reads every byte on
request and checks levels 1 and 2 against it.
"""

from __future__ import annotations

from jaxblend import _lazy

_NAMES = {
    "dataset_fingerprint": ".verify",
    "fingerprint": ".levels",
    "local_versions": ".levels",
    "memo_url": ".levels",
    "remembered": ".levels",
    "verify_dataset": ".verify",
}

__all__ = [
    "dataset_fingerprint",
    "fingerprint",
    "local_versions",
    "memo_url",
    "remembered",
    "verify_dataset",
]


# Names resolve on first use (the reader imports `levels`, so this package imports neither the
# reader nor `verify`, which opens datasets with it).
__getattr__, __dir__ = _lazy.exports(__name__, _NAMES)

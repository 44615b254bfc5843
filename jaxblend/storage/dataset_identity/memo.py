"""Remembers the content fingerprint of a dataset by the versions of its two files, so a cached
start neither downloads every `.idx` nor hashes every `.bin` again.

An object store gives every object version an identity of its own (GCS: the object generation;
S3: the ETag), which changes whenever the object is rewritten. The first time a dataset is read at
a given (`.idx` generation, `.bin` generation), its `.idx` is downloaded, validated and hashed
(`IndexedDataset.fingerprint`), and the result is recorded here; later starts that see the same
generations take the fingerprint from here and fetch the `.idx` only when its arrays are needed. A
rewritten object has a new generation, misses, and is identified again, so a changed dataset is
never taken for the old one. (For most bucket objects "identified" costs one metadata request, not
a read of the `.bin`: `store_checksums`.)

Local files have no generation; their version is `local_version`: device, inode, size, mtime and
ctime (nanoseconds). Any write changes mtime and ctime, and ctime cannot be set back by a user, so a
rewritten file misses too. A file changed within the timestamp granularity of the moment it was
hashed could keep its stamps, so (like git's "racy" index entries) a version is recorded only when
both files were last changed at least `SETTLE_SECONDS` before hashing began; a fresher file is
simply hashed again at its next open.

Where entries live is an `IdentityStoreOptions` (part of the `DataAccess` passed to every open;
`DataAccess.identity_store()` resolves it), handed to every call here: nothing is kept in module
state and the environment is not read (`IdentityStoreOptions.from_env` reads
`$JAXBLEND_IDENTITY_CACHE` and `$XDG_CACHE_HOME` once). Entries are small JSON files in
`local_dir` (default `~/.cache/jaxblend/identity`); `enabled=False` disables
the memo. A missing, unreadable or malformed entry is simply a miss.

With a `shared_url` (a bucket URL such as `gs://b/identity/`) the entries of bucket datasets live
there, shared by every host of a pod, so a new object version is read and hashed once by whichever
host (or `build_index` run) sees it first, not once per host. Entries of local datasets stay in the
local directory (their versions are per machine). A bucket entry is trusted for the same reason a
local one is: it is keyed by generations, which the store changes on every write. When the
index-map store is a bucket (`--data_cache_path=gs://...`), `shared_url` defaults to
`<data_cache_path>/identity/`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from jaxblend import atomic_write
from jaxblend.access import IdentityStoreOptions, ObjectStoreOptions
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.urls import is_url

FORMAT = b"v3"  # v3: the `.bin` component is its MD5 (v2: chunked SHA-256; entries not reused)
SETTLE_SECONDS = 2.0


def _store(options: IdentityStoreOptions, remote_dataset: bool) -> Path | str | None:
    """Where entries live: a local directory, a bucket URL (remote datasets only), or None (off)."""
    if not options.enabled:
        return None
    if remote_dataset and options.shared_url:
        return options.shared_url
    return Path(options.local_dir or os.path.expanduser("~/.cache/jaxblend/identity"))


def _read(store: Path | str, name: str, access: ObjectStoreOptions) -> str | None:
    if isinstance(store, Path):
        try:  # (plain `open`: read once per dataset at every start, pathlib's parsing is not free)
            with open(os.path.join(store, name)) as f:
                return f.read()
        except OSError:
            return None
    try:
        data = ObjectDirectory(store, access).read(name, "reading the identity memo")
    except (ValueError, OSError):  # a memo that cannot be read is a miss
        return None
    return None if data is None else data.decode(errors="replace")


def _write(store: Path | str, name: str, text: str, access: ObjectStoreOptions) -> None:
    if isinstance(store, Path):
        try:
            store.mkdir(parents=True, exist_ok=True)
            with atomic_write.atomic_file(store / name, "w", durable=False) as f:  # a cache
                f.write(text)
        except OSError:
            pass
        return
    try:  # an object-store write is atomic: readers see the old object or the new one
        ObjectDirectory(store, access).write(name, text.encode(), "writing the identity memo")
    except (ValueError, OSError):
        pass


@dataclasses.dataclass(frozen=True)
class Identity:
    """What a validated object version pair is: its content fingerprint and sizes."""

    fingerprint: str
    num_tokens: int
    bin_size: int


def _entry(url: str, idx_generation: bytes, bin_generation: bytes) -> str:
    key = b"|".join(
        [FORMAT, url.encode(), idx_generation.hex().encode(), bin_generation.hex().encode()]
    )
    return hashlib.sha256(key).hexdigest()[:40] + ".json"


def local_version(path: str) -> tuple[bytes, float]:
    """A local file's version stamp and the time (s since the epoch) it last changed.

    Raises:
      OSError: if the file cannot be stat'ed.
    """
    st = os.stat(path)
    fields = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    stamp = b"".join(int(v).to_bytes(16, "little", signed=True) for v in fields)
    return stamp, max(st.st_mtime_ns, st.st_ctime_ns) / 1e9


def lookup(
    url: str,
    idx_generation: bytes,
    bin_generation: bytes,
    *,
    options: IdentityStoreOptions,
    object_store: ObjectStoreOptions,
) -> Identity | None:
    """The recorded identity of this (`.idx`, `.bin`) version pair at `url`, or None.

    Args:
      url: the dataset's URL, or its real local path.
      idx_generation: the `.idx` version (object generation or `local_version` stamp).
      bin_generation: the `.bin` version.
      options: where entries live (`DataAccess.identity_store()`).
      object_store: how a bucket `shared_url` is reached.
    """
    store = _store(options, remote_dataset=is_url(url))
    if store is None or not idx_generation or not bin_generation:
        return None
    text = _read(store, _entry(url, idx_generation, bin_generation), object_store)
    if text is None:
        return None
    try:
        entry = json.loads(text)
        if entry.pop("url") != url:
            return None
        identity = Identity(**entry)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(identity.fingerprint, str) or not all(
        isinstance(v, int) and v >= 0 for v in (identity.num_tokens, identity.bin_size)
    ):
        return None
    return identity


def record(
    url: str,
    idx_generation: bytes,
    bin_generation: bytes,
    identity: Identity,
    *,
    options: IdentityStoreOptions,
    object_store: ObjectStoreOptions,
) -> None:
    """Records an identity (atomically; failures to write are ignored: the memo is a cache).

    Args: as `lookup`, plus the `identity` to record.
    """
    store = _store(options, remote_dataset=is_url(url))
    if store is None or not idx_generation or not bin_generation:
        return
    text = json.dumps({"url": url, **dataclasses.asdict(identity)})
    _write(store, _entry(url, idx_generation, bin_generation), text, object_store)

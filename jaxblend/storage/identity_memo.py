"""Remembers the content fingerprint of a dataset by the versions of its two files, so a cached
start neither downloads every `.idx` nor hashes every `.bin` again.

An object store gives every object version an identity of its own (GCS: the object generation;
S3: the ETag), which changes whenever the object is rewritten. The first time a dataset is read at
a given (`.idx` generation, `.bin` generation), its `.idx` is downloaded, validated and hashed
(`IndexedDataset.fingerprint`), and the result is recorded here; later starts that see the same
generations take the fingerprint from here and fetch the `.idx` only when its arrays are needed. A
rewritten object has a new generation, misses, and is hashed again, so a changed dataset is never
taken for the old one.

Local files have no generation; their version is `local_version`: device, inode, size, mtime and
ctime (nanoseconds). Any write changes mtime and ctime, and ctime cannot be set back by a user, so a
rewritten file misses too. A file changed within the timestamp granularity of the moment it was
hashed could keep its stamps, so (like git's "racy" index entries) a version is recorded only when
both files were last changed at least `SETTLE_SECONDS` before hashing began; a fresher file is
simply hashed again at its next open.

Entries are small JSON files in a local directory: `$JAXBLEND_IDENTITY_CACHE` if set (an empty
value or "off" disables the memo), else `$XDG_CACHE_HOME/jaxblend/identity` (default
`~/.cache/jaxblend/identity`). A missing, unreadable or malformed entry is simply a miss.

`$JAXBLEND_IDENTITY_CACHE` may also be a bucket URL (`gs://b/identity/`): the entries of bucket
datasets then live there, shared by every host of a pod, so a new object version is read and
hashed once by whichever host (or `build_index` run) sees it first, not once per host. Entries of
local datasets stay in the local default directory (their versions are per machine). A bucket
entry is trusted for the same reason a local one is: it is keyed by generations, which the store
changes on every write. When the index-map cache is a bucket (`--data_cache_path=gs://...`), the
memo of bucket datasets defaults to `<data_cache_path>/identity/` (`set_shared_url`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import tensorstore as ts

from jaxblend import atomic_write

ENV = "JAXBLEND_IDENTITY_CACHE"
FORMAT = b"v2"  # v2: fingerprints cover the `.bin` content digest (storage/content_digest.py)
SETTLE_SECONDS = 2.0


def _default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxblend" / "identity"


def _is_bucket_url(value: str) -> bool:
    return "://" in value and not value.startswith("file://")


_shared_url: str | None = None


def set_shared_url(url: str | None) -> None:
    """Makes `url` (a bucket URL) the memo of bucket datasets in this process, unless
    `$JAXBLEND_IDENTITY_CACHE` says otherwise; None restores the local default.

    The data flags call it with `<--data_cache_path>/identity/` when the index cache is a bucket,
    so a pod that shares its index maps also shares its dataset identities.
    """
    global _shared_url
    _shared_url = None if url is None else url.rstrip("/") + "/"


def _store(remote_dataset: bool) -> Path | str | None:
    """Where entries live: a local directory, a bucket URL (remote datasets only), or None (off)."""
    value = os.environ.get(ENV)
    if value is None:
        return _shared_url if remote_dataset and _shared_url else _default_directory()
    value = value.strip()
    if value in ("", "off"):
        return None
    if _is_bucket_url(value):
        return value.rstrip("/") + "/" if remote_dataset else _default_directory()
    return Path(value.removeprefix("file://"))


def _bucket(url: str) -> ts.KvStore:
    """The memo's kvstore (opened per use: the endpoint may change with the environment)."""
    from jaxblend.storage import object_store, open_kvstore

    spec = ts.KvStore.Spec(url).to_json()
    return open_kvstore(object_store.process_default().complete_spec(spec))


def _timeout() -> float:
    from jaxblend.storage import object_store

    return object_store.process_default().request_timeout


def _read(store: Path | str, name: str) -> str | None:
    if isinstance(store, Path):
        try:
            return (store / name).read_text()
        except OSError:
            return None
    try:
        res = _bucket(store).read(name).result(timeout=_timeout())
    except (ValueError, TimeoutError):
        return None
    return bytes(res.value).decode(errors="replace") if res.state == "value" else None


def _write(store: Path | str, name: str, text: str) -> None:
    if isinstance(store, Path):
        try:
            store.mkdir(parents=True, exist_ok=True)
            with atomic_write.atomic_file(store / name, "w", durable=False) as f:  # a cache
                f.write(text)
        except OSError:
            pass
        return
    try:  # an object-store write is atomic: readers see the old object or the new one
        _bucket(store).write(name, text.encode()).result(timeout=_timeout())
    except (ValueError, TimeoutError):
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


def lookup(url: str, idx_generation: bytes, bin_generation: bytes) -> Identity | None:
    """The recorded identity of this (`.idx`, `.bin`) version pair at `url`, or None."""
    store = _store(remote_dataset=_is_bucket_url(url))
    if store is None or not idx_generation or not bin_generation:
        return None
    text = _read(store, _entry(url, idx_generation, bin_generation))
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


def record(url: str, idx_generation: bytes, bin_generation: bytes, identity: Identity) -> None:
    """Records an identity (atomically; failures to write are ignored: the memo is a cache)."""
    store = _store(remote_dataset=_is_bucket_url(url))
    if store is None or not idx_generation or not bin_generation:
        return
    text = json.dumps({"url": url, **dataclasses.asdict(identity)})
    _write(store, _entry(url, idx_generation, bin_generation), text)

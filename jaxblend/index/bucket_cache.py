"""The index-map cache at a bucket URL (`--data_cache_path=gs://bucket/dir`, `s3://...`).

Hosts of a TPU pod share a bucket, not a filesystem. A bucket cache entry is a copy of a local
cache entry (`jaxblend.index.cache`: `<name>.npy` files + `manifest.json` with their SHA-256s)
under `<url>/<key>/`, plus a commit marker `<url>/<key>/COMMITTED` written last, holding the
manifest's checksum. Object stores have no rename, so the marker is what makes publishing atomic:
an entry without it (a publisher that died half-way) is never read, and is overwritten by the next
publisher.

* One process builds (`is_builder()`: JAX process 0; every process of a single-process run):
  it writes the entry into its local mirror, then uploads the files, manifest, marker last.
* The others wait for the marker (`BucketCacheOptions.wait_seconds`, then an error naming the
  entry's URL) and download the entry into their local mirror.
* Every process reads the maps from its local mirror (memory-mapped, checked like any local cache
  entry); a download (in `DOWNLOAD_CHUNK` pieces, `DOWNLOAD_WINDOW` in flight) is checked in full
  against the manifest's SHA-256s before use.

The local mirror is `<mirror_root>/<hash of the url>/`; `mirror_root` defaults to
`$JAXBLEND_INDEX_MIRROR`, else `<tmp>/jaxblend-index-mirror`. An entry already in the mirror is
not fetched again (its name is a fingerprint of the configuration and the datasets' content).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import tensorstore as ts
from absl import logging

from jaxblend import atomic_write
from jaxblend.index import cache

MARKER = "COMMITTED"
DOWNLOAD_CHUNK = 64 << 20
DOWNLOAD_WINDOW = 8
MIRROR_ENV = "JAXBLEND_INDEX_MIRROR"
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")


def is_url(path: str | None) -> bool:
    """Whether a cache path is a URL (a bucket), not a local directory (`file://` is local)."""
    return bool(path) and bool(_URL.match(path)) and not path.startswith("file://")


@dataclasses.dataclass(frozen=True)
class BucketCacheOptions:
    """How processes share a bucket cache.

    Attributes:
      wait_seconds: longest wait for the builder's commit marker before failing.
      poll_seconds: time between looks for the marker.
      builder: whether this process builds and publishes missing entries (None: JAX process 0).
      mirror_root: local directory of downloaded entries (None: see the module docstring).
    """

    wait_seconds: float = 900.0
    poll_seconds: float = 1.0
    builder: bool | None = None
    mirror_root: str | None = None

    def __post_init__(self):
        if not self.wait_seconds > 0 or not self.poll_seconds > 0:
            raise ValueError(
                f"bucket cache wait_seconds and poll_seconds must be > 0, got "
                f"{self.wait_seconds}, {self.poll_seconds}"
            )


_process_default = BucketCacheOptions()


def set_process_default(options: BucketCacheOptions) -> None:
    """Makes `options` the process's bucket-cache settings (CLIs set them from their flags)."""
    global _process_default
    _process_default = options


def process_default() -> BucketCacheOptions:
    """The process's bucket-cache settings."""
    return _process_default


def is_builder(options: BucketCacheOptions | None = None) -> bool:
    """Whether this process builds missing entries: the option, else whether it is JAX process 0."""
    options = options or _process_default
    if options.builder is not None:
        return options.builder
    if "jax" not in sys.modules:
        return True
    import jax

    return jax.process_index() == 0


def mirror_dir(url: str, options: BucketCacheOptions | None = None) -> str:
    """The local directory mirroring the bucket cache at `url`."""
    options = options or _process_default
    root = options.mirror_root or os.environ.get(MIRROR_ENV) or os.path.join(
        tempfile.gettempdir(), "jaxblend-index-mirror"
    )
    return os.path.join(root, hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16])


def entry_url(url: str, key: str) -> str:
    """URL of one entry's directory."""
    return f"{url.rstrip('/')}/{key}/"


def _kvstore(url: str) -> ts.KvStore:
    from jaxblend.storage import object_store, open_kvstore

    spec = ts.KvStore.Spec(url.rstrip("/") + "/").to_json()
    return open_kvstore(object_store.process_default().complete_spec(spec))


def _timeout() -> float:
    from jaxblend.storage import object_store

    return object_store.process_default().request_timeout


def _wait(future: Any, url: str, what: str) -> Any:
    from jaxblend.storage import _remote

    return _remote.wait(future, url, what, _timeout())


def _read(kv: ts.KvStore, key: str, url: str) -> bytes | None:
    res = _wait(kv.read(key), url + key, "reading the index cache")
    return bytes(res.value) if res.state == "value" else None


def committed(url: str, key: str) -> bool:
    """Whether entry `key` has its commit marker in the bucket."""
    return _read(_kvstore(url), f"{key}/{MARKER}", url.rstrip("/") + "/") is not None


def fetch(url: str, key: str, local_dir: str) -> bool:
    """Downloads committed entry `key` into `local_dir` (if not there yet); whether it is there.

    The download goes to a private temporary directory, is checked in full (manifest checksum,
    every array's SHA-256) and renamed into place.

    Raises:
      ObjectStoreError: the bucket failed or timed out.
      ValueError: the committed entry fails its checks (names the entry's URL).
    """
    if cache.load(local_dir, key) is not None:
        return True
    kv = _kvstore(url)
    where = entry_url(url, key)
    marker = _read(kv, f"{key}/{MARKER}", where)
    if marker is None:
        return False
    manifest_bytes = _read(kv, f"{key}/{cache.MANIFEST}", where)
    if manifest_bytes is None:
        raise ValueError(f"index cache {where}: committed but {cache.MANIFEST} is missing")
    manifest = json.loads(manifest_bytes)
    if manifest.get("checksum") != marker.decode().strip():
        raise ValueError(f"index cache {where}: {cache.MANIFEST} does not match its {MARKER} marker")
    final = cache.entry_path(local_dir, key)
    with atomic_write.atomic_directory(final, exists="keep", prefix=f".fetch-{key}-") as out:
        arrays = manifest.get("arrays")
        if not isinstance(arrays, dict):
            raise ValueError(f"index cache {where}: malformed {cache.MANIFEST}")  # noqa: TRY004
        for name, desc in arrays.items():
            size = desc.get("bytes") if isinstance(desc, dict) else None
            if not isinstance(size, int) or "/" in name:
                raise ValueError(f"index cache {where}: malformed {cache.MANIFEST} record {name!r}")
            _download(kv, f"{key}/{name}.npy", size, out, f"{name}.npy", where)
        with out.open(cache.MANIFEST) as f:
            f.write(manifest_bytes)
        problem = cache.check_dir(out.path, key)
        if problem is not None:
            raise ValueError(f"index cache {where}: downloaded entry fails its checks: {problem}")
    logging.info("fetched index cache entry %s into %s", where, local_dir)
    return True


def _download(
    kv: ts.KvStore,
    key: str,
    size: int,
    out: atomic_write.DirectoryWriter,
    filename: str,
    where: str,
) -> None:
    """Downloads the first `size` bytes of object `key` to file `filename` of `out` in
    `DOWNLOAD_CHUNK`-byte pieces, at most `DOWNLOAD_WINDOW` in flight (memory stays bounded
    whatever the array's size)."""
    name = where + key.rsplit("/", 1)[1]

    def take(r: slice, fut: Any) -> bytes:
        try:
            res = _wait(fut, name, "downloading the index cache")
        except ValueError:  # OUT_OF_RANGE: the object is shorter
            res = None
        data = bytes(res.value) if res is not None and res.state == "value" else b""
        if len(data) != r.stop - r.start:
            raise ValueError(
                f"index cache {name}: missing, or shorter than the {size} bytes its manifest records"
            )
        return data

    def pieces() -> Iterator[bytes]:
        pending: collections.deque = collections.deque()
        for offset in range(0, size, DOWNLOAD_CHUNK):
            r = slice(offset, min(offset + DOWNLOAD_CHUNK, size))
            pending.append((r, kv.read(key, byte_range=r)))
            if len(pending) == DOWNLOAD_WINDOW:
                yield take(*pending.popleft())
        while pending:
            yield take(*pending.popleft())

    with out.open(filename) as f:
        f.writelines(pieces())


def publish(url: str, key: str, local_dir: str) -> str:
    """Uploads local entry `key` of `local_dir` to the bucket, commit marker last; its URL."""
    kv = _kvstore(url)
    where = entry_url(url, key)
    entry = cache.entry_path(local_dir, key)
    with open(os.path.join(entry, cache.MANIFEST), "rb") as f:
        manifest_bytes = f.read()
    checksum = json.loads(manifest_bytes)["checksum"]
    _wait(kv.write(f"{key}/{MARKER}", None), where, "removing a stale commit marker")
    futures = []
    for name in sorted(os.listdir(entry)):
        if name.endswith(".npy"):
            with open(os.path.join(entry, name), "rb") as f:
                futures.append((name, kv.write(f"{key}/{name}", f.read())))
    futures.append((cache.MANIFEST, kv.write(f"{key}/{cache.MANIFEST}", manifest_bytes)))
    for name, fut in futures:
        _wait(fut, where + name, "uploading the index cache")
    _wait(kv.write(f"{key}/{MARKER}", checksum.encode()), where, "writing the commit marker")
    logging.info("published index cache entry %s", where)
    return where


def wait_for(url: str, key: str, local_dir: str, options: BucketCacheOptions | None = None) -> None:
    """Waits for another process to publish entry `key`, then downloads it.

    Raises:
      TimeoutError: no commit marker within `wait_seconds` (names the entry's URL).
    """
    options = options or _process_default
    deadline = time.monotonic() + options.wait_seconds
    logging.info("waiting for process 0 to publish index cache entry %s", entry_url(url, key))
    while not fetch(url, key, local_dir):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"index cache {entry_url(url, key)}: not published within "
                f"{options.wait_seconds:g} s (--data_cache_wait); the building process (0) is "
                f"slow or failed: check its log, or raise --data_cache_wait"
            )
        time.sleep(options.poll_seconds)


def check(url: str, key: str) -> str | None:
    """Downloads committed entry `key` (if not mirrored yet) and verifies every byte; problem or None."""
    mirror = mirror_dir(url)
    try:
        if not fetch(url, key, mirror):
            return f"{entry_url(url, key)} has no {MARKER} marker"
    except (OSError, ValueError) as err:
        return str(err)
    return cache.check(mirror, key)

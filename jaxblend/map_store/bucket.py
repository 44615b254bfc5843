"""The map store at a bucket URL (`--data_cache_path=gs://bucket/dir`, `s3://...`).

A bucket entry is a copy of a local entry (`jaxblend.map_store.entries`) under `<url>/<key>/`,
plus a commit marker `<url>/<key>/COMMITTED` holding the manifest's checksum, written last:
object stores have no rename, so the marker is what makes publishing atomic (an entry without it
is never read, and is overwritten by the next publisher). One process builds (`is_builder`) and
uploads; the others wait for the marker (`wait_seconds`) and download the entry (in
`DOWNLOAD_CHUNK` pieces, `DOWNLOAD_WINDOW` in flight, checked in full) into their local mirror,
`<MapStoreOptions.mirror>/<hash of the url>/`, which every process reads the maps from.
docs/pod.md ("Index maps") tells the whole protocol.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from absl import logging

from jaxblend import atomic_write
from jaxblend.access import MapStoreOptions, ObjectStoreOptions
from jaxblend.map_store import entries as cache
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.storage.object_store.publishing import publish, wait_for_publication

MARKER = "COMMITTED"
DOWNLOAD_CHUNK = 64 << 20
DOWNLOAD_WINDOW = 8


def is_builder(options: MapStoreOptions) -> bool:
    """Whether this process builds missing entries: the option, else whether it is JAX process 0."""
    if options.builder is not None:
        return options.builder
    if "jax" not in sys.modules:
        return True
    import jax

    return jax.process_index() == 0


def mirror_dir(url: str, options: MapStoreOptions) -> str:
    """The local directory mirroring the bucket map store at `url`."""
    root = options.mirror or os.path.join(tempfile.gettempdir(), "jaxblend-index-mirror")
    return os.path.join(root, hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16])


def entry_url(url: str, key: str) -> str:
    """URL of one entry's directory."""
    return f"{url.rstrip('/')}/{key}/"


def range_bytes(directory: ObjectDirectory, future: Any, key: str, what: str) -> bytes:
    """The bytes a range read of `key` returned; b"" when it is missing or ends before the range."""
    try:
        res = directory.wait(future, key, what)
    except ValueError:  # OUT_OF_RANGE
        return b""
    return bytes(res.value) if res.state == "value" else b""


class Bucket:
    """The entries of the map store at bucket `url`, reached with `object_store`'s options."""

    def __init__(self, url: str, object_store: ObjectStoreOptions) -> None:
        self.url = url.rstrip("/") + "/"
        self.object_store = object_store
        self._dir = ObjectDirectory(self.url, object_store)

    def read_object(self, key: str) -> bytes | None:
        """The whole object `key` under the store's URL (e.g. a publication record), or None.

        Raises:
          ObjectStoreError: the bucket failed or timed out.
        """
        return self._dir.read(key, "reading the map store")

    def write_object(self, key: str, data: bytes) -> str:
        """Writes object `key` under the store's URL in one request (atomic on GCS and S3); its URL.

        Raises:
          ObjectStoreError: the bucket failed or timed out.
        """
        self._dir.write(key, data, "writing the map store")
        return self._dir.url_of(key)

    def committed(self, key: str) -> bool:
        """Whether entry `key` has its commit marker in the bucket."""
        return self.read_object(f"{key}/{MARKER}") is not None

    def fetch(self, key: str, local_dir: str) -> bool:
        """Downloads committed entry `key` into `local_dir` (if not there yet); whether it is there.

        The download goes to a private temporary directory, is checked in full (manifest checksum,
        every array's SHA-256) and renamed into place.

        Raises:
          ObjectStoreError: the bucket failed or timed out.
          ValueError: the committed entry fails its checks (names the entry's URL).
        """
        if cache.load(local_dir, key) is not None:
            return True
        where = entry_url(self.url, key)
        marker = self.read_object(f"{key}/{MARKER}")
        if marker is None:
            return False
        manifest_bytes = self.read_object(f"{key}/{cache.MANIFEST}")
        if manifest_bytes is None:
            raise ValueError(f"index cache {where}: committed but {cache.MANIFEST} is missing")
        manifest = cache.parse_manifest(manifest_bytes, key, f"index cache {where}")
        if manifest["checksum"] != marker.decode().strip():
            raise ValueError(f"index cache {where}: {cache.MANIFEST} does not match its {MARKER} marker")
        final = cache.entry_path(local_dir, key)
        with atomic_write.atomic_directory(final, exists="keep", prefix=f".fetch-{key}-") as out:
            for name, desc in manifest["arrays"].items():
                self._download(f"{key}/{name}.npy", desc["bytes"], out, f"{name}.npy", where)
            with out.open(cache.MANIFEST) as f:
                f.write(manifest_bytes)
            problem = cache.check_dir(out.path, key)
            if problem is not None:
                raise ValueError(f"index cache {where}: downloaded entry fails its checks: {problem}")
        logging.info("fetched index cache entry %s into %s", where, local_dir)
        return True

    def _download(
        self,
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
            data = range_bytes(self._dir, fut, key, "downloading the map store")
            if len(data) != r.stop - r.start:
                raise ValueError(
                    f"index cache {name}: missing, or shorter than the {size} bytes its manifest records"
                )
            return data

        def pieces() -> Iterator[bytes]:
            pending: collections.deque = collections.deque()
            for offset in range(0, size, DOWNLOAD_CHUNK):
                r = slice(offset, min(offset + DOWNLOAD_CHUNK, size))
                pending.append((r, self._dir.start_read(key, r)))
                if len(pending) == DOWNLOAD_WINDOW:
                    yield take(*pending.popleft())
            while pending:
                yield take(*pending.popleft())

        with out.open(filename) as f:
            f.writelines(pieces())

    def publish(self, key: str, local_dir: str) -> str:
        """Uploads local entry `key` of `local_dir` to the bucket, commit marker last
        (`object_store.publish`); its URL."""
        where = entry_url(self.url, key)
        entry = cache.entry_path(local_dir, key)
        with open(os.path.join(entry, cache.MANIFEST), "rb") as f:
            manifest_bytes = f.read()
        checksum = json.loads(manifest_bytes)["checksum"]
        arrays = [
            (f"{key}/{name}", os.path.join(entry, name))
            for name in sorted(os.listdir(entry))
            if name.endswith(".npy")
        ]
        marker = f"{key}/{MARKER}"
        publish(
            self._dir,
            [[*arrays, (f"{key}/{cache.MANIFEST}", manifest_bytes)]],
            (marker, checksum.encode()),
            retract=[marker],
            what="uploading the map store",
        )
        logging.info("published index cache entry %s", where)
        return where

    def wait_for(self, key: str, local_dir: str, options: MapStoreOptions) -> None:
        """Waits for another process to publish entry `key`, then downloads it.

        Raises:
          TimeoutError: no commit marker within `wait_seconds` (names the entry's URL).
        """
        where = entry_url(self.url, key)
        logging.info("waiting for process 0 to publish index cache entry %s", where)
        wait_for_publication(
            lambda: self.fetch(key, local_dir) or None,
            f"index cache {where}",
            options.wait_seconds,
            options.poll_seconds,
            "the building process (0) is slow or failed: check its log, or raise --data_cache_wait",
        )

    def fetch_problem(self, key: str, local_dir: str) -> str | None:
        """Why committed entry `key` cannot be downloaded into `local_dir` (if not there yet), or
        None."""
        try:
            if not self.fetch(key, local_dir):
                return f"{entry_url(self.url, key)} has no {MARKER} marker"
        except (OSError, ValueError) as err:
            return str(err)
        return None

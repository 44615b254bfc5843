"""Preprocessing inputs at gs:// and s3:// URLs: each object is downloaded into a local mirror.

`fetch_inputs` replaces every URL among the ``--input`` patterns by a local copy of the object and
leaves local paths as they are, so partitioning, reading and the run manifest are the same code as
for local files (the same partitions and bytes).

A copy is ``<root>/<hash of the URL>/<generation hash>/<object name>`` (the name keeps its suffix,
which gives the format), downloaded once per object generation through TensorStore with the run's
`jaxblend.access.ObjectStoreOptions`: a rerun asks the store whether the generation changed
(a conditional read, no data transferred when it did not) and reuses the copy. The copy's mtime is
fixed (0), so the run manifest records the same path, size and mtime on every rerun for an unchanged
object and a different path for a changed one (a rerun with a changed input is refused, as locally).
``root`` is ``<work_dir>/inputs`` with ``work_dir`` given, else
``<tmp>/jaxblend-preprocess-inputs``. The download streams ``DOWNLOAD_CHUNK``-byte ranges, each
checked to come from the same generation.
"""

from __future__ import annotations

import glob
import hashlib
import os
import pathlib
import tempfile
from collections.abc import Sequence

import tensorstore as ts

from jaxblend import atomic_write
from jaxblend.access import ObjectStoreOptions
from jaxblend.preprocess.partitions import InputError
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.urls import is_url

_CURRENT = "generation"
DOWNLOAD_CHUNK = 64 << 20


def mirror_root(work_dir: str | None) -> str:
    """Where downloaded inputs go: ``<work_dir>/inputs``, else under the system temp."""
    if work_dir:
        return os.path.join(work_dir, "inputs")
    return os.path.join(tempfile.gettempdir(), "jaxblend-preprocess-inputs")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def fetch_inputs(
    patterns: Sequence[str], root: str, object_store: ObjectStoreOptions
) -> tuple[str, ...]:
    """``patterns`` with each gs:// or s3:// object replaced by its local copy (downloaded if
    missing or changed); local paths and globs unchanged.

    Raises:
      InputError: a URL with a wildcard, or an object that does not exist (names the URL).
      ObjectStoreError: the store failed or timed out.
    """
    for pattern in patterns:
        if is_url(pattern) and glob.has_magic(pattern):
            raise InputError(
                f"--input {pattern}: wildcards are not supported in gs:// and s3:// URLs; name "
                "each object (repeat --input or separate the URLs with commas)"
            )
    return tuple(_fetch(p, root, object_store) if is_url(p) else p for p in patterns)


def _fetch(url: str, root: str, object_store: ObjectStoreOptions) -> str:
    """The local copy of object ``url`` (see the module docstring)."""
    parent, _, name = url.rpartition("/")
    if not name or not parent.partition("://")[2]:
        raise InputError(f"--input {url}: name an object, e.g. gs://bucket/data/part-0.jsonl")
    directory = ObjectDirectory(parent + "/", object_store)
    home = os.path.join(root, _digest(url.encode()))
    current = os.path.join(home, _CURRENT)
    known = pathlib.Path(current).read_bytes() if os.path.exists(current) else None
    if known is not None and not os.path.exists(os.path.join(home, _digest(known), name)):
        known = None  # the copy is gone
    first = _read_chunk(directory, name, 0, if_not_equal=known)
    if first.state == "unspecified":  # unchanged since the download
        return os.path.join(home, _digest(known), name)
    if first.state != "value":
        raise InputError(
            f"--input {url}: object does not exist (check the URL, the bucket and the credentials)"
        )
    generation = bytes(first.stamp.generation)
    path = os.path.join(home, _digest(generation), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_write.atomic_file(path, "wb") as f:
        res, offset = first, 0
        while True:
            if bytes(res.stamp.generation) != generation:
                raise InputError(f"--input {url}: the object changed while it was downloaded; rerun")
            f.write(res.value)
            offset += len(res.value)
            if len(res.value) < DOWNLOAD_CHUNK:
                break
            res = _read_chunk(directory, name, offset)
            if res.state != "value":
                raise InputError(f"--input {url}: the object vanished while it was downloaded; rerun")
    os.utime(path, ns=(0, 0))
    with atomic_write.atomic_file(current, "wb") as f:
        f.write(generation)
    return path


def _read_chunk(
    directory: ObjectDirectory, name: str, offset: int, if_not_equal: bytes | None = None
) -> ts.KvStore.ReadResult:
    """Bytes ``[offset, offset + DOWNLOAD_CHUNK)`` of object ``name`` (fewer at its end)."""
    what = "downloading the input"
    try:
        return directory.read_result(
            name, slice(offset, offset + DOWNLOAD_CHUNK), what, if_not_equal=if_not_equal
        )
    except ValueError:  # OUT_OF_RANGE: fewer bytes left than a chunk
        return directory.read_result(name, slice(offset, None), what, if_not_equal=if_not_equal)

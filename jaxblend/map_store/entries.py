"""Entries of a local map store: `.npy` arrays + a JSON manifest under `<cache_dir>/<key>/`.

docs/format.md ("Cache layout") describes the entry. The key (computed by the pure index layer)
covers every parameter that changes the arrays and the index package's code, and names datasets
by content, never by path. Writes are atomic and durable (`atomic_write.atomic_directory`,
`exists="keep"`: when several processes build the same entry, the first rename wins). The
manifest records each array's shape, dtype, size, SHA-256 and a *summary* digest (the size plus
`SUMMARY_BLOCKS` blocks of `SUMMARY_BLOCK` bytes): `load(verify="summary")`, at every start,
checks the summaries; `verify="full"` every byte. An entry failing a check is moved aside with a
warning and the caller rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from typing import Any

import numpy as np
from absl import logging

from jaxblend import atomic_write
from jaxblend._pause import pause_point
from jaxblend.validation import require_choice

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
SUMMARY_BLOCKS = 64
SUMMARY_BLOCK = 4096
VERIFY_MODES = ("summary", "full")


class CorruptEntry(ValueError):
    """A cache entry whose manifest or arrays fail their checks."""


def entry_path(cache_dir: str, key: str) -> str:
    """Directory of the cache entry `key`."""
    return os.path.join(cache_dir, key)


class _HashingWriter:
    """A write-only file wrapper that feeds every written byte to SHA-256."""

    def __init__(self, f) -> None:
        self._f = f
        self.sha = hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self._f.write(data)


def _summary_offsets(size: int) -> list[int]:
    if size <= SUMMARY_BLOCKS * SUMMARY_BLOCK:
        return [0]
    last = size - SUMMARY_BLOCK
    return sorted({round(i * last / (SUMMARY_BLOCKS - 1)) for i in range(SUMMARY_BLOCKS)})


def summary_digest(path: str) -> str:
    """SHA-256 of a file's size and `SUMMARY_BLOCKS` blocks spread over it (all of a small file)."""
    size = os.path.getsize(path)
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        for offset in _summary_offsets(size):
            f.seek(offset)
            h.update(f.read(SUMMARY_BLOCK if size > SUMMARY_BLOCKS * SUMMARY_BLOCK else size))
    return h.hexdigest()


def file_digest(path: str) -> str:
    """SHA-256 of a whole file."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _write_array(out: atomic_write.DirectoryWriter, name: str, array: np.ndarray) -> dict[str, Any]:
    with out.open(f"{name}.npy") as f:
        writer = _HashingWriter(f)
        np.save(writer, np.ascontiguousarray(array), allow_pickle=False)
    path = out.file_path(f"{name}.npy")
    return {
        "shape": list(array.shape),
        "dtype": array.dtype.str,
        "bytes": os.path.getsize(path),
        "sha256": writer.sha.hexdigest(),
        "summary": summary_digest(path),
    }


def save(cache_dir: str, key: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> str:
    """Atomically and durably writes one cache entry; returns its directory.

    Args:
      cache_dir: the cache root (created if missing).
      key: the fingerprint naming the entry.
      arrays: name -> array; each saved as `<name>.npy`.
      meta: JSON-serializable metadata stored in the manifest.

    Returns:
      The entry directory (ours, or a competing process's that won the race).
    """
    os.makedirs(cache_dir, exist_ok=True)
    final = entry_path(cache_dir, key)
    if os.path.lexists(final) and not os.path.isdir(final):
        logging.warning("index cache entry %s is not a directory; replacing it", final)
        discard(cache_dir, key)
    with atomic_write.atomic_directory(final, exists="keep", prefix=f".tmp-{key}-") as out:
        described = {}
        for name, array in arrays.items():
            pause_point("cache-write", len(described))
            described[name] = _write_array(out, name, array)
        pause_point("cache-write", len(described))
        manifest = {
            "format_version": FORMAT_VERSION,
            "fingerprint": key,
            "arrays": described,
            "meta": meta,
        }
        manifest["checksum"] = _manifest_checksum(manifest)
        out.write_json(MANIFEST, manifest, indent=1, sort_keys=True)
    return final


def _manifest_checksum(manifest: dict[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def parse_manifest(data: bytes, key: str, final: str) -> dict[str, Any]:
    """The manifest `data` of entry `key` (at `final`, named in errors), checked: its checksum,
    format version, fingerprint and array records.

    Raises:
      ValueError: (`CorruptEntry`, or a JSON error) it fails a check.
    """
    manifest = json.loads(data)
    if not isinstance(manifest, dict):
        raise CorruptEntry(f"{final}: manifest is not a JSON object")
    if manifest.get("checksum") != _manifest_checksum(manifest):
        raise CorruptEntry(f"{final}: manifest checksum mismatch")
    if manifest.get("format_version") != FORMAT_VERSION or manifest.get("fingerprint") != key:
        raise CorruptEntry(f"manifest version/fingerprint mismatch in {final}")
    arrays, meta = manifest.get("arrays"), manifest.get("meta")
    if not isinstance(arrays, dict) or not isinstance(meta, dict):
        raise CorruptEntry(f"{final}: manifest 'arrays'/'meta' are not JSON objects")
    fields = {"shape": list, "dtype": str, "bytes": int, "sha256": str, "summary": str}
    for name, desc in arrays.items():
        ok = isinstance(desc, dict) and all(isinstance(desc.get(k), t) for k, t in fields.items())
        if not ok or "/" in name or name.startswith("."):
            raise CorruptEntry(f"{final}: malformed manifest record for array {name!r}")
    return manifest


def _check_array(path: str, desc: dict[str, Any], verify: str) -> np.ndarray:
    size = os.path.getsize(path)
    if size != desc["bytes"]:
        raise CorruptEntry(f"{path}: {size} bytes, manifest says {desc['bytes']}")
    if summary_digest(path) != desc["summary"]:
        raise CorruptEntry(f"{path}: content differs from the manifest's summary digest")
    if verify == "full" and file_digest(path) != desc["sha256"]:
        raise CorruptEntry(f"{path}: content differs from the manifest's SHA-256")
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    if list(array.shape) != desc["shape"] or array.dtype.str != desc["dtype"]:
        raise CorruptEntry(
            f"{path}: shape {array.shape} dtype {array.dtype.str}, manifest says "
            f"{desc['shape']} {desc['dtype']}"
        )
    return array


def _open_dir(final: str, key: str, verify: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    if not os.path.isdir(final):
        raise CorruptEntry(f"{final} is not a directory")
    with open(os.path.join(final, MANIFEST), "rb") as f:
        manifest = parse_manifest(f.read(), key, final)
    arrays = {
        name: _check_array(os.path.join(final, f"{name}.npy"), desc, verify)
        for name, desc in manifest["arrays"].items()
    }
    return arrays, manifest["meta"]


def load(
    cache_dir: str, key: str, verify: str = "summary"
) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """Entry `key` of `cache_dir`, memory-mapped, as `(arrays, meta)`; None if absent or corrupt
    (a corrupt entry is moved aside). `verify`: "summary" (size + sampled blocks of every array)
    or "full" (every byte)."""
    require_choice("verify", verify, VERIFY_MODES)
    if not os.path.lexists(entry_path(cache_dir, key)):
        return None
    try:
        return _open_dir(entry_path(cache_dir, key), key, verify)
    except (OSError, ValueError) as err:  # CorruptEntry and json/np errors are ValueErrors
        logging.warning(
            "index cache entry %s is corrupt (%s); rebuilding it", entry_path(cache_dir, key), err
        )
        discard(cache_dir, key)
        return None


def check_dir(directory: str, key: str) -> str | None:
    """Fully verifies entry directory `directory` (in a store, or a download) as entry `key`
    without changing it; the problem found, or None."""
    try:
        _open_dir(directory, key, "full")
    except (OSError, ValueError) as err:
        return str(err)
    return None


def discard(cache_dir: str, key: str) -> None:
    """Moves an entry aside (atomically) and deletes it; a concurrent discard is harmless."""
    final = entry_path(cache_dir, key)
    trash = os.path.join(cache_dir, f".trash-{key}-{uuid.uuid4().hex}")
    try:
        os.rename(final, trash)
    except OSError:
        return
    if os.path.isdir(trash) and not os.path.islink(trash):
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.unlink(trash)

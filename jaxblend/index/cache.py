"""On-disk cache of index maps: `.npy` arrays + a JSON manifest under `<cache_dir>/<fingerprint>/`.

* The fingerprint (computed by the caller) covers every parameter that changes the arrays and
  identifies datasets by content, never by path.
* Writes are atomic: arrays and manifest are written into a private temporary directory next to
  the target, which is then renamed into place. When several processes build the same entry at
  once, the first rename wins and the others discard their copy and load the winner's.
* Loads are memory maps (`mmap_mode="r"`); the manifest records each array's shape, dtype and
  file size. A missing file, unreadable manifest or mismatching array marks the entry corrupt:
  it is moved aside with a warning and the caller rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from typing import Any

import numpy as np
from absl import logging

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def fingerprint(payload: dict[str, Any]) -> str:
    """A stable hex digest of a JSON-serializable payload (sorted keys, no spaces)."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def entry_path(cache_dir: str, key: str) -> str:
    """Directory of the cache entry `key`."""
    return os.path.join(cache_dir, key)


def _describe(array: np.ndarray) -> dict[str, Any]:
    return {"shape": list(array.shape), "dtype": array.dtype.str}


def save(cache_dir: str, key: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> str:
    """Atomically writes one cache entry; returns its directory.

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
    tmp = tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=cache_dir)
    try:
        described = {}
        for name, array in arrays.items():
            path = os.path.join(tmp, f"{name}.npy")
            np.save(path, np.ascontiguousarray(array), allow_pickle=False)
            described[name] = {**_describe(array), "bytes": os.path.getsize(path)}
        manifest = {
            "format_version": FORMAT_VERSION,
            "fingerprint": key,
            "arrays": described,
            "meta": meta,
        }
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not os.path.isdir(final):
                raise
            # Another process published the same entry first: use theirs.
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def load(cache_dir: str, key: str) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    """Loads an entry memory-mapped; None if absent or corrupt (a corrupt entry is moved aside).

    Args:
      cache_dir: the cache root.
      key: the fingerprint.

    Returns:
      `(arrays, meta)` or None.
    """
    final = entry_path(cache_dir, key)
    if not os.path.isdir(final):
        return None
    try:
        with open(os.path.join(final, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        if manifest.get("format_version") != FORMAT_VERSION or manifest.get("fingerprint") != key:
            raise ValueError(f"manifest version/fingerprint mismatch in {final}")
        arrays = {}
        for name, desc in manifest["arrays"].items():
            path = os.path.join(final, f"{name}.npy")
            if os.path.getsize(path) != desc["bytes"]:
                raise ValueError(
                    f"{path}: {os.path.getsize(path)} bytes, manifest says {desc['bytes']}"
                )
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            if list(array.shape) != desc["shape"] or array.dtype.str != desc["dtype"]:
                raise ValueError(
                    f"{path}: shape {array.shape} dtype {array.dtype.str}, manifest says "
                    f"{desc['shape']} {desc['dtype']}"
                )
            arrays[name] = array
        return arrays, manifest["meta"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        logging.warning("index cache entry %s is corrupt (%s); rebuilding it", final, err)
        discard(cache_dir, key)
        return None


def discard(cache_dir: str, key: str) -> None:
    """Moves an entry aside (atomically) and deletes it; a concurrent discard is harmless."""
    final = entry_path(cache_dir, key)
    trash = os.path.join(cache_dir, f".trash-{key}-{uuid.uuid4().hex}")
    try:
        os.rename(final, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)

"""Atomic, durable writes of one file or one directory: readers see the old state or the new one.

One mechanism for every place jaxblend publishes a result on a local filesystem:

* `atomic_path(path, suffix="")`: a context manager yielding a temporary path next to `path`
  (`<path>.tmp-<pid>-<random><suffix>`; the suffix is for writers that infer a format from the
  name, such as `np.savez` or matplotlib's `savefig`). The caller writes that path; on a clean exit
  the file is fsynced, renamed over `path` (`os.replace`) and the directory fsynced. On an error
  the temporary file is removed and `path` is untouched.
* `atomic_file(path, mode="wb", encoding=None)`: the same, yielding an open file object.
* `atomic_directory(path, exists="keep"|"replace", prefix=None)`: a context manager yielding a
  `DirectoryWriter` over a private temporary directory in `path`'s parent
  (`tempfile.mkdtemp(prefix=prefix or ".tmp-<name>-")`). Files are written through it
  (`save_npy`, `write_json`, `open`). On a clean exit every file in the temporary directory and
  the directory itself are fsynced, the directory is renamed to `path` and the parent fsynced.
  On an error the temporary directory is removed and `path` is untouched. An existing `path`:
    - `exists="keep"` (content-addressed entries, e.g. the index cache): the first rename wins;
      a writer that finds `path` already published discards its copy and keeps the existing one
      (concurrent builders of the same entry all end up reading the winner's).
    - `exists="replace"`: the old directory is moved aside, the new one renamed in, and the old
      one deleted (a reader never sees a half-written directory; between the two renames `path`
      is briefly absent).
* `publish_directory(tmp, path, exists)`: the last step of `atomic_directory` alone, for a
  directory filled by other means (e.g. downloaded), which must be in `path`'s parent.

Example (a directory of `.npy` arrays plus a JSON description):

    with atomic_write.atomic_directory(plan_dir, exists="replace") as d:
        for name, array in arrays.items():
            d.save_npy(name, array)
        d.write_json("plan.json", {"version": 1})
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from jaxblend.validation import require_choice

EXISTS_MODES = ("keep", "replace")


def fsync_path(path: str) -> None:
    """Flushes a file's bytes, or a directory's entries (new names, renames), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _writing_mode(mode: str, encoding: str | None, owner: str) -> str | None:
    """The encoding to write in `mode`: "wb", or "w" (UTF-8 by default); refuses other modes."""
    require_choice(f"{owner} mode", mode, ("wb", "w"))
    return "utf-8" if mode == "w" and encoding is None else encoding


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "", durable: bool = True) -> Iterator[str]:
    """Yields a temporary path to write; publishes it as `path` on a clean exit (see module doc).

    Args:
      path: the destination file.
      suffix: appended to the temporary name (e.g. ".npz", ".png").
      durable: fsync the file and its directory (False for caches, where a write lost in a crash
        is only a miss: readers still never see a partial file; saves ~8 ms per file here).

    Yields:
      The temporary path, in the same directory as `path`.
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}"
    try:
        yield tmp
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    if durable:
        fsync_path(os.path.dirname(os.path.abspath(path)))


@contextlib.contextmanager
def atomic_file(
    path: str | os.PathLike, mode: str = "wb", encoding: str | None = None, durable: bool = True
) -> Iterator[IO[Any]]:
    """Yields a file open for writing; publishes it as `path` on a clean exit (see module doc).

    Args:
      path: the destination file.
      mode: "wb" or "w" (text; `encoding` defaults to UTF-8).
      encoding: text encoding for mode "w".
      durable: see `atomic_path`.
    """
    encoding = _writing_mode(mode, encoding, "atomic_file")
    with atomic_path(path, durable=durable) as tmp, open(tmp, mode, encoding=encoding) as f:
        yield f  # closed (flushed) before atomic_path publishes it


class DirectoryWriter:
    """Writes files into the private temporary directory of `atomic_directory`.

    Attributes:
      path: the temporary directory (files may also be written into it directly; every regular
        file in it is fsynced before the directory is published).
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def file_path(self, name: str) -> str:
        """The path of file `name` inside the temporary directory."""
        if not name or os.sep in name or name.startswith("."):
            raise ValueError(f"file name {name!r}: expected a name without '/' or a leading '.'")
        return os.path.join(self.path, name)

    @contextlib.contextmanager
    def open(self, name: str, mode: str = "wb", encoding: str | None = None) -> Iterator[IO[Any]]:
        """Opens file `name` for writing (fsynced with the directory when it is published)."""
        encoding = _writing_mode(mode, encoding, "DirectoryWriter.open")
        with open(self.file_path(name), mode, encoding=encoding) as f:
            yield f

    def save_npy(self, name: str, array: np.ndarray) -> None:
        """Saves `array` as `<name>.npy` (no pickles)."""
        with self.open(f"{name}.npy") as f:
            np.save(f, np.asarray(array), allow_pickle=False)

    def write_json(self, name: str, payload: Any, **dump_kwargs: Any) -> None:
        """Writes `payload` as JSON file `name` (`dump_kwargs` go to `json.dump`)."""
        with self.open(name, "w") as f:
            json.dump(payload, f, **dump_kwargs)


def _check_exists_mode(exists: str) -> None:
    if exists not in EXISTS_MODES:
        raise ValueError(f"exists={exists!r}; expected one of {EXISTS_MODES}")


@contextlib.contextmanager
def atomic_directory(
    path: str | os.PathLike, exists: str = "keep", prefix: str | None = None
) -> Iterator[DirectoryWriter]:
    """Yields a `DirectoryWriter`; publishes its directory as `path` on a clean exit.

    Args:
      path: the destination directory (its parent is created if missing).
      exists: what to do with an existing `path`: "keep" it or "replace" it (see module doc).
      prefix: name prefix of the temporary directory (default ".tmp-<name>-").

    Yields:
      The writer; its `path` is the temporary directory.
    """
    _check_exists_mode(exists)
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=prefix or f".tmp-{os.path.basename(path)}-", dir=parent)
    try:
        yield DirectoryWriter(tmp)
        publish_directory(tmp, path, exists)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already unless an error or a lost race


def publish_directory(tmp: str, path: str | os.PathLike, exists: str = "keep") -> str:
    """Durably renames the complete directory `tmp` to `path` (same parent); returns `path`.

    Every regular file directly in `tmp` and `tmp` itself are fsynced first, the parent after.
    With `exists="keep"` and `path` already published by someone else, `tmp` is removed.
    """
    _check_exists_mode(exists)
    path = os.fspath(path)
    parent = os.path.dirname(os.path.abspath(path))
    for entry in os.scandir(tmp):
        if entry.is_file(follow_symlinks=False):
            fsync_path(entry.path)
    fsync_path(tmp)
    if exists == "replace" and os.path.lexists(path):
        _replace_directory(tmp, path, parent)
    else:
        try:
            os.rename(tmp, path)
        except OSError:
            if exists == "replace" or not os.path.isdir(path):
                raise
            # Another writer published the same entry first: keep theirs.
            shutil.rmtree(tmp, ignore_errors=True)
    fsync_path(parent)
    return path


def _replace_directory(tmp: str, path: str, parent: str) -> None:
    old = tempfile.mkdtemp(prefix=f".old-{os.path.basename(path)}-", dir=parent)
    aside = os.path.join(old, "previous")
    os.replace(path, aside)
    os.replace(tmp, path)
    if os.path.isdir(aside) and not os.path.islink(aside):
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.remove(aside)
        os.rmdir(old)

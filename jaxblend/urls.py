"""Whether a path names a local file or an object in a store: the one rule, used everywhere.

A *URL* here is anything with a scheme (`gs://`, `s3://`, `memory://`, ...) except `file://`,
which names a local path. Everything else (plain paths, `os.PathLike`, `file://` URLs) is local.
Standard library only, so the pure layers can use it.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
T = TypeVar("T")


def is_url(path: str | os.PathLike | None) -> bool:
    """Whether `path` is an object-store (or other non-local) URL; False for None, local paths
    and `file://` URLs."""
    if path is None or isinstance(path, os.PathLike):
        return False
    text = str(path)
    return bool(_SCHEME.match(text)) and not text.lower().startswith("file://")


def local_path(path: str | os.PathLike) -> str:
    """The local filesystem path of a local `path` (`file://` removed).

    Raises:
      ValueError: `path` is a URL of an object store.
    """
    if is_url(path):
        raise ValueError(f"{path!s} is not on the local filesystem")
    text = os.fspath(path)
    return text[len("file://"):] if text.lower().startswith("file://") else text


def map_paths(
    fn: Callable[[str], T], paths: Iterable[str], max_concurrency: int, thread_name: str
) -> dict[str, T]:
    """`{path: fn(path)}` for each distinct path, in order of first appearance.

    Requests to a store wait, so when there are several URLs they run at once on up to
    `max_concurrency` threads (named `thread_name`); local paths are CPU-bound (threads would only
    contend for the GIL) and run in this thread, after the URLs. An exception of `fn` propagates.
    """
    names = list(dict.fromkeys(paths))
    remote = [p for p in names if is_url(p)]
    done: dict[str, T] = {}
    if len(remote) > 1:
        workers = min(max_concurrency, len(remote))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name) as pool:
            done.update(zip(remote, pool.map(fn, remote)))
    return {p: done[p] if p in done else fn(p) for p in names}

"""Whether a path names a local file or an object in a store: the one rule, used everywhere.

A *URL* here is anything with a scheme (`gs://`, `s3://`, `memory://`, ...) except `file://`,
which names a local path. Everything else (plain paths, `os.PathLike`, `file://` URLs) is local.
Standard library only, so the pure layers can use it.
"""

from __future__ import annotations

import os
import re

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


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

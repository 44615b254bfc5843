"""Remembers the content fingerprint of bucket objects by their generation, so a cached start does
not download every `.idx` to hash it.

An object store gives every object version an identity of its own (GCS: the object generation;
S3: the ETag), which changes whenever the object is rewritten. The first time a dataset is read at
a given (`.idx` generation, `.bin` generation), its `.idx` is downloaded, validated and hashed
(`IndexedDataset.fingerprint`), and the result is recorded here; later starts that see the same
generations take the fingerprint from here and fetch the `.idx` only when its arrays are needed. A
rewritten object has a new generation, misses, and is hashed again, so a changed dataset is never
taken for the old one.

Entries are small JSON files in a local directory: `$JAXBLEND_IDENTITY_CACHE` if set (an empty
value or "off" disables the memo), else `$XDG_CACHE_HOME/jaxblend/identity` (default
`~/.cache/jaxblend/identity`). A missing, unreadable or malformed entry is simply a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from jaxblend import atomic_write

ENV = "JAXBLEND_IDENTITY_CACHE"


def _directory() -> Path | None:
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip() in ("", "off") else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxblend" / "identity"


@dataclasses.dataclass(frozen=True)
class Identity:
    """What a validated object version pair is: its content fingerprint and sizes."""

    fingerprint: str
    num_tokens: int
    bin_size: int


def _entry(url: str, idx_generation: bytes, bin_generation: bytes) -> str:
    key = b"|".join([url.encode(), idx_generation.hex().encode(), bin_generation.hex().encode()])
    return hashlib.sha256(key).hexdigest()[:40] + ".json"


def lookup(url: str, idx_generation: bytes, bin_generation: bytes) -> Identity | None:
    """The recorded identity of this (`.idx`, `.bin`) version pair at `url`, or None."""
    directory = _directory()
    if directory is None or not idx_generation or not bin_generation:
        return None
    try:
        entry = json.loads((directory / _entry(url, idx_generation, bin_generation)).read_text())
        if entry.pop("url") != url:
            return None
        identity = Identity(**entry)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(identity.fingerprint, str) or not all(
        isinstance(v, int) and v >= 0 for v in (identity.num_tokens, identity.bin_size)
    ):
        return None
    return identity


def record(url: str, idx_generation: bytes, bin_generation: bytes, identity: Identity) -> None:
    """Records an identity (atomically; failures to write are ignored: the memo is a cache)."""
    directory = _directory()
    if directory is None or not idx_generation or not bin_generation:
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        entry = directory / _entry(url, idx_generation, bin_generation)
        with atomic_write.atomic_file(entry, "w") as f:
            json.dump({"url": url, **dataclasses.asdict(identity)}, f)
    except OSError:
        return

"""What every index-map cache key holds besides the configuration and the datasets' content.

A map store (`jaxblend.map_store`) names each saved entry by a key computed here, in the pure
index layer, with `jaxblend.identity.fingerprint`: the fields that change the arrays, the datasets'
content fingerprints (never their paths), `MAPS_LAYOUT` (how arrays and metadata are laid out) and
`code_digest()` (the source code of this package), so any change to the index code yields new keys.
"""

from __future__ import annotations

import functools
import hashlib
import os

MAPS_LAYOUT = 2  # the arrays and metadata of an entry; bump when they change meaning


def sources_digest(directory: str) -> str:
    """SHA-256 (hex, 32 digits) of the names and bytes of the `.py` files in `directory`.

    Raises:
      RuntimeError: `directory` holds no Python sources.
    """
    h = hashlib.sha256()
    names = sorted(n for n in os.listdir(directory) if n.endswith(".py"))
    if not names:
        raise RuntimeError(f"{directory}: no Python sources to fingerprint the index kernels")
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()[:32]


@functools.cache
def code_digest() -> str:
    """`sources_digest` of the index package: any change to its code yields new cache keys."""
    return sources_digest(os.path.dirname(os.path.abspath(__file__)))

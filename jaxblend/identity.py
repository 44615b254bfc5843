"""One way to name a thing by what it is: `fingerprint(kind, version, **fields)`.

Every identity jaxblend saves or compares (index-map cache keys, source and schema identities,
mock sources, step plans, token-budget plans, loader states) is built here, from explicit, named
fields and a version number, never from a `repr` or an ad-hoc string:

* the encoding is canonical JSON (sorted keys, no spaces): field order and formatting never
  matter, and floats are written exactly (`repr`) so 0.1 and 0.1000000001 differ;
* a field whose value is `OMIT` is left out, so adding an option whose default does not change
  the data keeps every existing fingerprint (the caller passes `OMIT` for the default);
* `kind` and `version` name the scheme: bump `version` when the meaning of the fields changes.

Pure standard library + numpy scalars, so the index layer can use it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxblend.validation import require_int

DIGITS = 32


class _Omit:
    """Marker of a field left out of a fingerprint (its value is the data-neutral default)."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT = _Omit()


def unless_default(value: Any, default: Any) -> Any:
    """`value`, or `OMIT` when it equals `default` (for options added after states were saved)."""
    return OMIT if value == default else value


def canonical(value: Any) -> Any:
    """`value` as plain JSON data: tuples as lists, numpy scalars as Python numbers, floats as
    their exact `repr` text, mappings with string keys.

    Raises:
      TypeError: a value with no canonical form (an object, a set, NaN).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise TypeError(f"fingerprint field value {value!r} is not finite")
        return {"float": repr(float(value))}
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"fingerprint mapping key {k!r} is not a string")
            if v is not OMIT:
                out[k] = canonical(v)
        return out
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (bytes, bytearray)):
        return [canonical(v) for v in value]
    raise TypeError(f"fingerprint field value {value!r} ({type(value).__name__}) has no canonical form")


def fingerprint(kind: str, version: int, /, **fields: Any) -> str:
    """The identity of a `kind` (scheme `version`) with these named fields: 32 hex digits of the
    SHA-256 of their canonical JSON. Fields whose value is `OMIT` are left out.

    Raises:
      TypeError: a field value with no canonical form.
    """
    if not kind or not isinstance(kind, str):
        raise ValueError(f"fingerprint kind must be a non-empty string, got {kind!r}")
    require_int("fingerprint version", version, 1)
    payload = {"kind": kind, "version": version, "fields": canonical(fields)}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:DIGITS]

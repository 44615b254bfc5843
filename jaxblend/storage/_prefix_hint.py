"""The likely fix for a dataset prefix whose `.idx` does not exist."""

from __future__ import annotations

import difflib
import glob
import os

_SUFFIXES = (".bin", ".idx")
# What `jaxblend.tools.preprocess` (and Megatron's preprocess_data.py) append to --output-prefix.
_PREPROCESS_TAILS = ("_text_document", "_text_sentence")
_MAX_CANDIDATES = 3
_CLOSE = 0.8  # difflib's similarity ratio above which a dataset name counts as a likely typo


def suffix_hint(prefix: str) -> str:
    """The clause for a prefix given with its `.bin`/`.idx` suffix (any prefix, URLs too)."""
    for suffix in _SUFFIXES:
        if prefix.endswith(suffix):
            return f"; a prefix has no {suffix} suffix: give {prefix[: -len(suffix)]}"
    return ""


def missing_prefix_hint(prefix: str) -> str:
    """A clause to append to "index file does not exist" ('' when nothing better is known).

    A prefix given with its `.bin`/`.idx` suffix → the prefix without it; a preprocessing output
    prefix without its `_{key}_{level}` tail, when such datasets exist → those prefixes; else the
    datasets of the same directory whose names are close (a typo), or that the directory does
    not exist.
    """
    if suffix_hint(prefix):
        return suffix_hint(prefix)
    found = [prefix + tail for tail in _PREPROCESS_TAILS if os.path.exists(prefix + tail + ".idx")]
    if not found:
        names = {
            p[: -len(".idx")]
            for level in ("document", "sentence")
            for p in glob.glob(glob.escape(prefix) + f"_*{level}.idx")
        }
        found = sorted(names)[:_MAX_CANDIDATES]
    if found:
        return "; preprocessing appends _{key}_{level} to its output prefix: did you mean " + (
            " or ".join(found)
        ) + "?"
    return _near_name_hint(prefix)


def _near_name_hint(prefix: str) -> str:
    """A mistyped prefix → the datasets of its directory with a close name; a directory that does
    not exist → says so."""
    directory, name = os.path.split(prefix)
    directory = directory or "."
    if not os.path.isdir(directory):
        return f"; the directory {directory} does not exist"
    try:
        names = [n[: -len(".idx")] for n in os.listdir(directory) if n.endswith(".idx")]
    except OSError:
        return ""
    close = difflib.get_close_matches(name, names, n=_MAX_CANDIDATES, cutoff=_CLOSE)
    if not close:
        return ""
    return "; did you mean " + " or ".join(os.path.join(os.path.dirname(prefix), n) for n in close) + "?"

"""Text normalization and word n-grams shared by every cleaning step (one helper per mechanism)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence

_PUNCT_OR_SPACE = re.compile(r"[\W_]+", re.UNICODE)
_SPACE = re.compile(r"\s+", re.UNICODE)


def record_text(values: Mapping[str, str | Sequence[str]]) -> str:
    """The text the cleaning steps look at: every key's value, lists joined by newlines, keys by
    blank lines (in ``json_keys`` order)."""
    return "\n\n".join(v if isinstance(v, str) else "\n".join(v) for v in values.values())


def normalize(text: str) -> str:
    """NFKC, case-folded, punctuation removed, whitespace collapsed to single spaces."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _PUNCT_OR_SPACE.sub(" ", text).strip()


def normalized_words(text: str) -> list[str]:
    """The words of :func:`normalize`'s output."""
    n = normalize(text)
    return n.split(" ") if n else []


def raw_words(text: str) -> list[str]:
    """Whitespace-separated words, punctuation kept (what the quality heuristics count)."""
    return _SPACE.split(text.strip()) if text.strip() else []


def word_ngrams(words: Sequence[str], n: int) -> list[str]:
    """The word n-grams of ``words`` joined by spaces (a shorter text gives one n-gram of all)."""
    if len(words) <= n:
        return [" ".join(words)] if words else []
    return [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]


def hash64(data: bytes) -> int:
    """A stable 64-bit hash (BLAKE2b; the same on every machine and Python process)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")

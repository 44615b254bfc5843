"""Gopher-style quality heuristics: each filter a score, bounds, and a histogram for the report.

The filters and default bounds are those published with DeepMind's Gopher (Rae et al., 2021,
"Scaling Language Models", appendix A: "MassiveText quality filters") and reused by datatrove,
Dolma and NeMo Curator:

* ``word_count``: words (whitespace-separated) between 50 and 100,000.
* ``mean_word_length``: mean characters per word between 3 and 10.
* ``symbol_word_ratio``: (``#`` + ``...``/``…``) per word at most 0.1.
* ``bullet_lines``: share of lines starting with a bullet at most 0.9.
* ``ellipsis_lines``: share of lines ending with an ellipsis at most 0.3.
* ``alpha_words``: share of words with at least one letter at least 0.8.
* ``stop_words``: at least 2 of "the be to of and that have with" present.
* ``dup_lines`` / ``dup_paragraphs``: share of lines (paragraphs) repeating an earlier one at most 0.3.
* ``dup_line_chars`` / ``dup_paragraph_chars``: share of characters in such repeats at most 0.2.
* ``top_2gram`` .. ``top_4gram``: share of word characters in the most frequent n-gram at most
  0.20, 0.18, 0.16.
* ``dup_5gram`` .. ``dup_10gram``: share of word characters covered by n-grams occurring more than
  once at most 0.15, 0.14, 0.13, 0.12, 0.11, 0.10.

A document fails the first enabled filter (in this order) whose score is outside its bounds; the
drop reason is ``quality_<name>``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

import numpy as np

from jaxblend.preprocess.cleaning import text as text_lib

_PRIME = 1_000_000_007
_LENGTH_TAG = 0x9E3779B97F4A7C15
_MAX_N = 10  # the longest n-gram of the repetition filters
_BULLETS = ("•", "●", "○", "▪", "▫", "■", "□", "◦", "‣", "⁃", "-", "*", "·")
_ELLIPSES = ("...", "…")
_STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))
_PARAGRAPHS = re.compile(r"\n\s*\n")
_LETTER = re.compile(r"[^\W\d_]")


@dataclasses.dataclass(frozen=True)
class Filter:
    """One heuristic: ``score(doc)`` must lie in ``[low, high]`` (``None`` = unbounded).

    Attributes:
      name: Filter name (flag value and drop reason ``quality_<name>``).
      low: Smallest allowed score.
      high: Largest allowed score.
      bins: Histogram bin edges of the report's plot.
      log: Plot the score on a log axis.
    """

    name: str
    low: float | None
    high: float | None
    bins: tuple[float, ...]
    log: bool = False

    def passes(self, score: float) -> bool:
        return (self.low is None or score >= self.low) and (self.high is None or score <= self.high)


class Doc:
    """A document's words, lines and paragraphs, computed once for every filter.

    Word n-grams are compared by a 64-bit polynomial hash of their words' ids (built for n = 1, 2,
    ... incrementally), so the repetition filters are vectorized; the n-grams of every length are
    counted in one sort. Two different n-grams of one document sharing a hash is vanishingly
    unlikely, and the result is the same on every run.
    """

    __slots__ = ("_counts", "lengths", "lines", "paragraphs", "text", "word_chars", "words")

    def __init__(self, text: str) -> None:
        self.text = text
        self.words = text_lib.raw_words(text)
        self.word_chars = sum(map(len, self.words))
        self.lines = [ln for ln in text.split("\n") if ln.strip()]
        self.paragraphs = [p for p in _PARAGRAPHS.split(text) if p.strip()]
        self.lengths = np.fromiter(map(len, self.words), np.int64, len(self.words))
        self._counts: dict[int, np.ndarray] | None = None

    def _count_all(self) -> dict[int, np.ndarray]:
        vocab: dict[str, int] = {}
        ids = np.asarray([vocab.setdefault(w, len(vocab)) for w in self.words], np.uint64)
        h = ids + np.uint64(1)
        hashes, sizes = [], []
        with np.errstate(over="ignore"):
            for n in range(2, _MAX_N + 1):
                if len(self.words) < n:
                    break
                h = h[:-1] * np.uint64(_PRIME) + ids[n - 1 :] + np.uint64(1)
                hashes.append(h ^ (np.uint64(n) * np.uint64(_LENGTH_TAG)))  # lengths kept apart
                sizes.append(h.shape[0])
        if not hashes:
            return {}
        _, inverse, counts = np.unique(
            np.concatenate(hashes), return_inverse=True, return_counts=True
        )
        per_start = np.split(counts[inverse], np.cumsum(sizes)[:-1])
        return {n: c for n, c in zip(range(2, _MAX_N + 1), per_start)}

    def ngram_counts(self, n: int) -> np.ndarray | None:
        """For each start position, how often its word n-gram occurs (None: fewer than n words)."""
        if self._counts is None:
            self._counts = self._count_all()
        return self._counts.get(n)

    def gram_chars(self, n: int) -> np.ndarray:
        """Characters (without spaces) of every word n-gram, by start position."""
        c = np.concatenate([[0], np.cumsum(self.lengths)])
        return c[n:] - c[:-n]


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def _dup_share(items: Sequence[str], by_chars: bool) -> float:
    seen: set[str] = set()
    dup = total = 0
    for it in items:
        w = len(it) if by_chars else 1
        total += w
        if it in seen:
            dup += w
        seen.add(it)
    return _ratio(dup, total)


def _top_ngram(doc: Doc, n: int) -> float:
    counts = doc.ngram_counts(n)
    if counts is None:
        return 0.0
    count = int(counts.max())
    if count < 2:
        return 0.0
    chars = doc.gram_chars(n)  # the longest of the most frequent n-grams (deterministic on ties)
    return _ratio(count * int(chars[counts == count].max()), doc.word_chars)


def _dup_ngram(doc: Doc, n: int) -> float:
    counts = doc.ngram_counts(n)
    if counts is None:
        return 0.0
    starts = np.flatnonzero(counts > 1)
    if not starts.size:
        return 0.0
    edge = np.zeros(len(doc.words) + 1, np.int64)  # words covered by a repeated n-gram
    np.add.at(edge, starts, 1)
    np.add.at(edge, starts + n, -1)
    covered = np.cumsum(edge[:-1]) > 0
    return _ratio(int(doc.lengths[covered].sum()), doc.word_chars)


def _frac(edges: float, stop: float, step: float) -> tuple[float, ...]:
    return tuple(float(x) for x in np.round(np.arange(edges, stop + step / 2, step), 6))


_SHARE_BINS = _frac(0.0, 1.0, 0.025)
_SCORES: dict[str, Callable[[Doc], float]] = {
    "word_count": lambda d: float(len(d.words)),
    "mean_word_length": lambda d: _ratio(d.word_chars, len(d.words)),
    "symbol_word_ratio": lambda d: _ratio(
        d.text.count("#") + sum(d.text.count(e) for e in _ELLIPSES), len(d.words)
    ),
    "bullet_lines": lambda d: _ratio(
        sum(ln.lstrip().startswith(_BULLETS) for ln in d.lines), len(d.lines)
    ),
    "ellipsis_lines": lambda d: _ratio(
        sum(ln.rstrip().endswith(_ELLIPSES) for ln in d.lines), len(d.lines)
    ),
    "alpha_words": lambda d: _ratio(sum(1 for w in d.words if _LETTER.search(w)), len(d.words)),
    "stop_words": lambda d: float(len(_STOP_WORDS.intersection(w.lower() for w in d.words))),
    "dup_lines": lambda d: _dup_share(d.lines, False),
    "dup_paragraphs": lambda d: _dup_share(d.paragraphs, False),
    "dup_line_chars": lambda d: _dup_share(d.lines, True),
    "dup_paragraph_chars": lambda d: _dup_share(d.paragraphs, True),
    **{f"top_{n}gram": (lambda d, n=n: _top_ngram(d, n)) for n in (2, 3, 4)},
    **{f"dup_{n}gram": (lambda d, n=n: _dup_ngram(d, n)) for n in range(5, 11)},
}

GOPHER: tuple[Filter, ...] = (
    Filter("word_count", 50, 100_000, tuple(float(x) for x in np.geomspace(1, 1e6, 61)), log=True),
    Filter("mean_word_length", 3, 10, _frac(0.0, 20.0, 0.25)),
    Filter("symbol_word_ratio", None, 0.1, _SHARE_BINS),
    Filter("bullet_lines", None, 0.9, _SHARE_BINS),
    Filter("ellipsis_lines", None, 0.3, _SHARE_BINS),
    Filter("alpha_words", 0.8, None, _SHARE_BINS),
    Filter("stop_words", 2, None, _frac(-0.5, 8.5, 1.0)),
    Filter("dup_lines", None, 0.3, _SHARE_BINS),
    Filter("dup_paragraphs", None, 0.3, _SHARE_BINS),
    Filter("dup_line_chars", None, 0.2, _SHARE_BINS),
    Filter("dup_paragraph_chars", None, 0.2, _SHARE_BINS),
    Filter("top_2gram", None, 0.20, _SHARE_BINS),
    Filter("top_3gram", None, 0.18, _SHARE_BINS),
    Filter("top_4gram", None, 0.16, _SHARE_BINS),
    *(
        Filter(f"dup_{n}gram", None, round(0.15 - 0.01 * (n - 5), 2), _SHARE_BINS)
        for n in range(5, 11)
    ),
)
FILTER_NAMES = tuple(f.name for f in GOPHER)


def bin_index(f: Filter, value: float) -> int:
    """Histogram slot of ``value``: 0 below the first edge, ``len(bins)`` above the last, else its
    bin (the last bin includes its right edge, as ``numpy.histogram``)."""
    if value == f.bins[-1]:
        return len(f.bins) - 1
    return int(np.searchsorted(f.bins, value, side="right"))


def score(name: str, doc: Doc) -> float:
    """Returns filter ``name``'s score of ``doc``."""
    return _SCORES[name](doc)


def select(names: Sequence[str], overrides: dict[str, float]) -> tuple[Filter, ...]:
    """The enabled filters in canonical order with ``overrides`` (``name.min``/``name.max``) applied.

    Raises:
      ValueError: An unknown filter name or override key.
    """
    wanted = set(FILTER_NAMES if "all" in names else names)
    unknown = sorted(wanted - set(FILTER_NAMES))
    if unknown:
        raise ValueError(
            f"unknown quality filter(s) {unknown}; choose from all, {', '.join(FILTER_NAMES)}"
        )
    out = []
    for f in GOPHER:
        if f.name not in wanted:
            continue
        low = overrides.get(f"{f.name}.min", f.low)
        high = overrides.get(f"{f.name}.max", f.high)
        out.append(dataclasses.replace(f, low=low, high=high))
    bad = sorted(
        k
        for k in overrides
        if k.rsplit(".", 1)[0] not in wanted or not k.endswith((".min", ".max"))
    )
    if bad:
        raise ValueError(
            f"quality threshold(s) {bad} name no enabled filter; write <filter>.min=<v> or "
            "<filter>.max=<v> for a filter given to --clean_quality"
        )
    return tuple(out)

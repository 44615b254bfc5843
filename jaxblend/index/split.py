"""Split strings ("969,30,1") to split matrices and per-split sequence ranges.

Pure index math, no I/O. Reproduces Megatron-Core's rules exactly (docs/format.md, 'Splits'): the
numbers are extracted from the string, zero-padded to three, normalized in float64, turned into
bookends by running Python float sums, and split i of a dataset with N sequences covers
`int(round(lo * N)) .. int(round(hi * N))` (Python's round: half to even).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

import numpy as np

SPLIT_NAMES: tuple[str, str, str] = ("train", "valid", "test")

_NUMBER = re.compile(r"[.0-9]+")


def wanted_splits(splits: Sequence[str] | None) -> tuple[str, ...]:
    """The split names asked for, in `SPLIT_NAMES` order (None: all three).

    Raises:
      ValueError: an unknown name, or none.
    """
    if splits is None:
        return SPLIT_NAMES
    if not splits or any(s not in SPLIT_NAMES for s in splits):
        raise ValueError(f"splits {list(splits)}: expected a non-empty subset of {SPLIT_NAMES}")
    return tuple(s for s in SPLIT_NAMES if s in splits)


def parse_split(split: str) -> tuple[float, float, float]:
    """Parses and normalizes a split string such as "969,30,1".

    Args:
      split: comma (or any non-numeric) separated non-negative weights, at most three.

    Returns:
      The three normalized fractions (train, valid, test), float64 normalized like Megatron.

    Raises:
      ValueError: the string has no number, an unparsable number, more than three parts, a
        negative part, or parts summing to zero.
    """
    if not isinstance(split, str):
        raise TypeError(f"split must be a string like '969,30,1', got {split!r}")
    if "-" in split:
        raise ValueError(f"split {split!r} has a negative part; parts must be >= 0")
    tokens = _NUMBER.findall(split)
    if not tokens:
        raise ValueError(
            f"split {split!r} does not parse: expected up to 3 numbers like '969,30,1'"
        )
    try:
        parts = [float(token) for token in tokens]
    except ValueError:
        raise ValueError(f"split {split!r} does not parse: bad number among {tokens}") from None
    if len(parts) > len(SPLIT_NAMES):
        raise ValueError(f"split {split!r} has {len(parts)} parts; at most 3 (train, valid, test)")
    parts += [0.0] * (len(SPLIT_NAMES) - len(parts))
    if any(not math.isfinite(p) for p in parts):
        raise ValueError(f"split {split!r} has a non-finite part")
    total = float(np.sum(np.array(parts, dtype=np.float64)))
    if total <= 0.0:
        raise ValueError(f"split {split!r} sums to zero; at least one part must be > 0")
    normalized = (np.array(parts, dtype=np.float64) / np.float64(total)).tolist()
    return (normalized[0], normalized[1], normalized[2])


def split_matrix(fractions: tuple[float, float, float]) -> list[tuple[float, float] | None]:
    """Turns normalized split fractions into bookends; an empty interval becomes None.

    Args:
      fractions: output of `parse_split`.

    Returns:
      Per split, `(lo, hi)` or None when the split is empty.
    """
    bounds = [0.0]
    for fraction in fractions:
        bounds.append(bounds[-1] + fraction)  # running Python float sums, as Megatron
    matrix: list[tuple[float, float] | None] = []
    for lo, hi in itertools.pairwise(bounds):
        matrix.append(None if hi <= lo else (lo, hi))
    return matrix


def split_range(bookend: tuple[float, float], num_sequences: int) -> tuple[int, int]:
    """The sequence range `[begin, end)` of one split of a dataset with `num_sequences` sequences."""
    lo, hi = bookend
    return round(lo * float(num_sequences)), round(hi * float(num_sequences))


def split_indices(bookend: tuple[float, float], num_sequences: int) -> np.ndarray:
    """Sequence ids of one split, as Megatron's `np.arange(begin, end, dtype=int32)`."""
    begin, end = split_range(bookend, num_sequences)
    return np.arange(begin, end, dtype=np.int32)

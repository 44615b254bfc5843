"""Blend specifications: Megatron blend lists and data_path strings -> prefixes and weights.

Two list forms are accepted, as in Megatron-LM (docs/format.md, 'Blend lists'): prefixes alone
(`["p1", "p2"]`, the weights then follow the datasets' sizes) or flattened weight/prefix pairs
(`["30", "p1", "70", "p2"]`). A Megatron `--data_path` string ("30 /d/a 70 /d/b") is the same list
separated by white space. Weights are validated here and normalized in float64 exactly as Megatron
normalizes them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Blend:
    """A parsed blend.

    Attributes:
      prefixes: dataset prefixes in blend order (dataset id j = position j).
      weights: the raw (not normalized) weights, or None when the blend follows dataset sizes.
    """

    prefixes: tuple[str, ...]
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.prefixes:
            raise ValueError("a blend needs at least one dataset prefix, got none")
        if self.weights is not None:
            if len(self.weights) != len(self.prefixes):
                raise ValueError(
                    f"blend has {len(self.prefixes)} prefixes but {len(self.weights)} weights"
                )
            validate_weights(self.weights, "blend weights")


def validate_weights(weights: Sequence[float], parameter: str) -> None:
    """Raises ValueError naming `parameter` for NaN, infinite, negative, zero or all-zero weights.

    Megatron's BlendedDataset requires every weight to be > 0, so a zero weight is refused too.
    """
    values = [float(w) for w in weights]
    for j, w in enumerate(values):
        if math.isnan(w) or math.isinf(w):
            raise ValueError(f"{parameter}[{j}] = {w!r} is not a finite number")
        if w < 0:
            raise ValueError(f"{parameter}[{j}] = {w!r} is negative; weights must be > 0")
    if values and all(w == 0 for w in values):
        raise ValueError(f"{parameter} = {values} are all zero; weights must be > 0")
    for j, w in enumerate(values):
        if w == 0:
            raise ValueError(f"{parameter}[{j}] = 0.0; every weight must be > 0 (drop the dataset)")


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_blend(blend: Sequence[str] | str, parameter: str = "blend") -> Blend:
    """Parses a Megatron blend list or data_path string.

    Args:
      blend: `["p1", "p2"]`, `["30", "p1", "70", "p2"]`, or a white-space separated string of
        either form ("30 /d/a 70 /d/b", "/d/a").
      parameter: the parameter name used in error messages.

    Returns:
      The parsed `Blend` (weights not normalized).

    Raises:
      ValueError: empty blend, odd-length weight/prefix list, mixed forms, bad weights.
    """
    items = _items(blend)
    if not items:
        raise ValueError(f"{parameter} = {blend!r} names no dataset")
    weights = [_as_float(item) for item in items[0::2]]
    looks_weighted = len(items) > 1 and all(w is not None for w in weights)
    if len(items) % 2 == 1:
        if looks_weighted:
            raise ValueError(
                f"{parameter} = {items!r} has odd length {len(items)}: a weight/prefix list "
                "must alternate weight, prefix"
            )
        return Blend(prefixes=tuple(items))
    if looks_weighted:
        raw = [float(item) for item in items[0::2]]
        validate_weights(raw, parameter)
        return Blend(prefixes=tuple(items[1::2]), weights=tuple(raw))
    if any(w is not None for w in weights):
        raise ValueError(
            f"{parameter} = {items!r} mixes weights and prefixes; use either ['p1', 'p2'] or "
            "['w1', 'p1', 'w2', 'p2']"
        )
    return Blend(prefixes=tuple(items))


def _items(blend: Sequence[str] | str) -> list[str]:
    items = blend.split() if isinstance(blend, str) else [str(item) for item in blend]
    if len(items) == 1 and len(items[0].split()) > 1:
        items = items[0].split()
    return [item.strip() for item in items if item.strip()]


def swapped_weights_hint(blends: Sequence[Sequence[str] | str | None], missing: str) -> str:
    """The fix when a dataset that does not exist is a weight written after its prefix.

    ``"/d/a 30 /d/b 70"`` parses as four prefixes (Megatron reads it so too); when opening the
    "prefix" ``30`` fails, the fix is the weight first: ``"30 /d/a 70 /d/b"``.

    Args:
      blends: the raw blends of a configuration (None = absent).
      missing: the error of the failed open (it names ``<prefix>.idx``).

    Returns:
      A clause to append to that error, or '' when no blend reads prefix, weight.
    """
    for raw in blends:
        if raw is None:
            continue
        items = _items(raw)
        prefixes, weights = items[0::2], items[1::2]
        if (
            len(items) % 2 == 0
            and all(_as_float(w) is not None for w in weights)
            and all(_as_float(p) is None for p in prefixes)
            and any(f"{w}.idx:" in missing for w in weights)
        ):
            fixed = " ".join(f"{w} {p}" for p, w in zip(prefixes, weights))
            return (
                f"; {' '.join(items)!r} looks like prefix, weight pairs but a blend is weight, "
                f"prefix: give {fixed!r}"
            )
    return ""


def blend_prefixes(blends: Sequence[Sequence[str] | str | None]) -> list[str]:
    """Every distinct prefix the blends name (None = absent), in order of first appearance.

    Linear in the blend size (10,000-prefix blends are common).
    """
    return list(
        dict.fromkeys(p for raw in blends if raw is not None for p in parse_blend(raw).prefixes)
    )


def normalize(weights: Sequence[float]) -> list[float]:
    """float64 normalization `w / sum(w)` exactly as Megatron's `normalize` (numpy sum)."""
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()

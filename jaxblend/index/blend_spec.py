"""Blends: the one typed form of a Megatron blend list, and the one rule for its weights.

Two list forms are accepted, as in Megatron-LM (docs/format.md, 'Blend lists'): prefixes alone
(`["p1", "p2"]`, the weights then follow the datasets' sizes) or flattened weight/prefix pairs
(`["30", "p1", "70", "p2"]`). A Megatron `--data_path` string ("30 /d/a 70 /d/b") is the same list
separated by white space.

Every entry that names a blend (`--data_path`, the per-split paths, data-args files, data-schedule
stages, Megatron phases, `GPTDataConfig` built from Python) turns it into a `Blend` once, through
`parse_blend`, and everything downstream reads the `Blend`. Its weights follow one rule
(`validate_weights`), Megatron-Core's: the weights must *normalize*, i.e. every `w_j / sum(w)`
(float64, as Megatron's `normalize`) is finite and > 0. So every weight is finite and non-zero,
all have one sign (`-30 a -70 b` normalizes to 0.3, 0.7 as Megatron accepts it), and their sum is
finite. Weights are normalized in float64 exactly as Megatron normalizes them.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Blend(Sequence[str]):
    """A parsed, validated blend.

    A `Blend` is also the Megatron blend list it was written as: a sequence of its items
    (`list(blend) == ["30", "/d/a", "70", "/d/b"]`, the text as given), so it can be written back
    as `--data_path` tokens. Two blends are equal when their prefixes and weights are.

    Attributes:
      prefixes: dataset prefixes in blend order (dataset id j = position j).
      weights: the raw (not normalized) weights, or None when the blend follows dataset sizes.
      items: the Megatron list as written (weights as given: "30", not 30.0); by default the
        weights are written as `repr(float)` without a trailing ".0".

    Raises:
      ValueError: no prefix, as many weights as prefixes missing, weights that break the rule
        (`validate_weights`), or items that do not spell these prefixes and weights.
    """

    prefixes: tuple[str, ...]
    weights: tuple[float, ...] | None = None
    items: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefixes", tuple(str(p) for p in self.prefixes))
        if not self.prefixes:
            raise ValueError("a blend needs at least one dataset prefix, got none")
        if self.weights is not None:
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
            if len(self.weights) != len(self.prefixes):
                raise ValueError(
                    f"blend has {len(self.prefixes)} prefixes but {len(self.weights)} weights"
                )
            validate_weights(self.weights, "blend weights")
        items = tuple(str(item) for item in self.items)
        if not items:
            items = self._spelled()
        elif not self._spells(items):
            raise ValueError(f"blend items {list(items)!r} do not spell {self!r}")
        object.__setattr__(self, "items", items)

    def _spelled(self) -> tuple[str, ...]:
        if self.weights is None:
            return self.prefixes
        return tuple(
            item for w, p in zip(self.weights, self.prefixes) for item in (_weight_text(w), p)
        )

    def _spells(self, items: tuple[str, ...]) -> bool:
        if self.weights is None:
            return items == self.prefixes
        return items[1::2] == self.prefixes and len(items) == 2 * len(self.prefixes) and all(
            _as_float(text) == w for text, w in zip(items[0::2], self.weights)
        )

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:  # type: ignore[override]
        return self.items[index]

    def normalized_weights(self) -> tuple[float, ...] | None:
        """The weights normalized once, `w / sum(w)` as Megatron's `normalize`, or None."""
        return None if self.weights is None else tuple(normalize(self.weights))


def _weight_text(w: float) -> str:
    return repr(float(w)).removesuffix(".0")


_RULE = " (Megatron's rule: give positive weights)"


def validate_weights(weights: Sequence[float], parameter: str) -> None:
    """The one rule for blend weights, Megatron-Core's: they must normalize.

    Megatron normalizes a blend's weights (`w / numpy.sum(w)`, float64) and its `BlendedDataset`
    requires every normalized weight to be > 0. So a weight that is NaN or infinite, a zero
    weight, weights of both signs and a sum that overflows are refused; weights that are all
    negative normalize as their absolute values do and are accepted, as Megatron accepts them.

    Raises:
      ValueError: one line naming `parameter` and the offending weight.
    """
    values = np.asarray(weights, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        raise ValueError(f"{parameter}[{bad[0]}] = {float(values[bad[0]])!r} is not a finite number")
    if len(values) and not np.any(values):
        raise ValueError(
            f"{parameter} = {values.tolist()} are all zero; every normalized weight "
            f"w / sum(w) must be > 0{_RULE}"
        )
    zero = np.flatnonzero(values == 0)
    if len(zero):
        raise ValueError(
            f"{parameter}[{zero[0]}] = 0.0 is zero; every normalized weight w / sum(w) must be "
            "> 0 (drop the dataset instead)"
        )
    negative, positive = np.flatnonzero(values < 0), np.flatnonzero(values > 0)
    if len(negative) and len(positive):
        j, k = int(negative[0]), int(positive[0])
        raise ValueError(
            f"{parameter}[{j}] = {float(values[j])!r} is negative while {parameter}[{k}] = "
            f"{float(values[k])!r} is positive; every normalized weight w / sum(w) must be > 0"
            f"{_RULE}"
        )
    with np.errstate(over="ignore", under="ignore"):
        total = np.sum(values)
        shares = values / total
    if not np.isfinite(total) or not np.all(shares > 0):
        raise ValueError(
            f"{parameter} sum to {float(total)!r}: they do not normalize (w / sum(w) must be "
            "finite and > 0); scale them down"
        )


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_blend(blend: Blend | Sequence[str] | str, parameter: str = "blend") -> Blend:
    """The `Blend` of a Megatron blend list or data_path string (a `Blend` is returned as is).

    Args:
      blend: `["p1", "p2"]`, `["30", "p1", "70", "p2"]`, or a white-space separated string of
        either form ("30 /d/a 70 /d/b", "/d/a"), or an already parsed `Blend`.
      parameter: where the blend comes from, for messages (`--data_path`, a file, a stage).

    Returns:
      The parsed `Blend` (weights not normalized; its items the list as written).

    Raises:
      ValueError: one line naming `parameter`: an empty blend, an odd-length weight/prefix list,
        mixed forms, weights that break the rule (`validate_weights`).
    """
    if isinstance(blend, Blend):
        return blend
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
        return Blend(prefixes=tuple(items), items=tuple(items))
    if looks_weighted:
        validate_weights(weights, parameter)
        return Blend(prefixes=tuple(items[1::2]), weights=tuple(weights), items=tuple(items))
    if any(w is not None for w in weights):
        raise ValueError(
            f"{parameter} = {items!r} mixes weights and prefixes; use either ['p1', 'p2'] or "
            "['w1', 'p1', 'w2', 'p2']"
        )
    return Blend(prefixes=tuple(items), items=tuple(items))


def parse_optional_blend(
    blend: Blend | Sequence[str] | str | None, parameter: str
) -> Blend | None:
    """`parse_blend`, with None or an empty list/string meaning "no blend" (None)."""
    if blend is None or isinstance(blend, Blend):
        return blend
    if not _items(blend):
        return None
    return parse_blend(blend, parameter)


def parse_stage_blend(blend: Blend | Sequence[str] | str, where: str) -> Blend:
    """The blend of one stage of a staged blend (`BlendStage`, `DataStage`): `parse_blend` plus
    the stages' own rules, in one place.

    A stage names each dataset at most once, and a stage of several datasets gives their weights
    (weights by dataset size are ambiguous once datasets carry over between stages).

    Raises:
      ValueError: one line starting with `where`.
    """
    try:
        parsed = parse_blend(blend, "blend")
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    repeated = [p for p, n in collections.Counter(parsed.prefixes).items() if n > 1]
    if repeated:
        raise ValueError(
            f"{where}: blend names dataset {repeated[0]!r} twice; give it once with the summed "
            "weight"
        )
    if parsed.weights is None and len(parsed.prefixes) > 1:
        raise ValueError(
            f"{where}: blend {list(parsed)!r} has several datasets but no weights; give weight, "
            "prefix pairs (e.g. [\"50\", \"/d/a\", \"50\", \"/d/b\"])"
        )
    return parsed


def _items(blend: Sequence[str] | str) -> list[str]:
    if isinstance(blend, Blend):
        return list(blend.items)
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


def blend_prefixes(blends: Sequence[Blend | Sequence[str] | str | None]) -> list[str]:
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

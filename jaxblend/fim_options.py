"""Fill-in-the-middle settings: `FIMOptions`, Megatron-LM's `--fim-*` values, validated.

Light on purpose (no numpy, no Numba): the flag layer (`jaxblend.cli.flag_values`,
`jaxblend.cli.schema_flags`) takes the flags' defaults and names from here, so each default is
written once. The rewrite itself is `jaxblend.sources.fim`, which re-exports `FIMOptions`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jaxblend.preprocess.tokenizer_spec import TokenizerSpec

_TOKENS = ("prefix_token", "middle_token", "suffix_token", "pad_token", "eod_token")


def _rate(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in [0, 1], got {value!r}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class FIMOptions:
    """Megatron-LM's FIM settings (`--fim-rate`, `--fim-spm-rate`, ...).

    Attributes:
      rate: probability that a segment (or, with `split_sample`, a segment's fragments) is
        rewritten (`--fim_rate`).
      spm_rate: probability that a rewritten fragment is SPM rather than PSM (`--fim_spm_rate`).
      split_sample: a token (by name) at which segments are cut into fragments
        (`--fim_split_sample`), or None.
      fragment_rate: probability that each fragment is rewritten (`--fim_fragment_rate`); required
        with `split_sample`, refused without it.
      no_prefix: fragments whose text starts with this string are never rewritten
        (`--fim_no_prefix`), or None.
      prefix_token, middle_token, suffix_token, pad_token, eod_token: the sentinel tokens by name
        (Megatron's defaults); `eod_token` delimits the segments.
      tokenizer: the tokenizer for data without a preprocessing record (a
        `jaxblend.preprocess.tokenizer_spec.TokenizerSpec`, from `--tokenizer_type` & co.), or
        None. Not part of the identity: the loaded tokenizer's own identity is (`FIMTransform`).
    """

    rate: float = 0.5
    spm_rate: float = 0.5
    split_sample: str | None = None
    fragment_rate: float | None = None
    no_prefix: str | None = None
    prefix_token: str = "<fim_prefix>"
    middle_token: str = "<fim_middle>"
    suffix_token: str = "<fim_suffix>"
    pad_token: str = "<fim_pad>"
    eod_token: str = "<|endoftext|>"
    tokenizer: TokenizerSpec | None = dataclasses.field(default=None, compare=False)

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The settings, each given by flag `--fim_<name>`: every field but `tokenizer`."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "tokenizer")

    def __post_init__(self) -> None:
        if self.split_sample is not None and self.fragment_rate is None:
            raise ValueError(
                f"--fim_split_sample={self.split_sample} needs --fim_fragment_rate (the FIM "
                "probability of each fragment)"
            )
        if self.fragment_rate is not None and self.split_sample is None:
            raise ValueError(
                "--fim_fragment_rate applies only with --fim_split_sample (the token that "
                "cuts segments into fragments)"
            )
        for name in ("rate", "spm_rate", "fragment_rate"):
            value = getattr(self, name)
            if value is not None or name != "fragment_rate":
                object.__setattr__(self, name, _rate(f"fim {name} (--fim_{name})", value))
        for name in _TOKENS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"--fim_{name} must be a token name, got {value!r}")
        if self.split_sample is not None and not self.split_sample:
            raise ValueError("--fim_split_sample must be a token name, not empty")

    def identity_fields(self) -> dict[str, object]:
        """The settings that change a FIM batch, as named fingerprint fields."""
        settings = ("rate", "spm_rate", "split_sample", "fragment_rate", "no_prefix")
        tokens = [getattr(self, n) for n in _TOKENS]
        return {n: getattr(self, n) for n in settings} | {"tokens": tokens}

"""Fill-in-the-middle flags (Megatron-LM's `--fim-*`, dashed spellings accepted) and their
`jaxblend.fim_options.FIMOptions` (also `jaxblend.sources.fim.FIMOptions`).

`define_fim_flags()` is part of the schema flags (`define_schema_flags`): every program that builds
GPT batches (training, `dump_batches`, `inspect`) takes them. `fim_options(values, tokenizer)`
turns their values (`DataFlagValues`) into the schema's `fim` field, or None without `--fim_data`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from absl import flags

from jaxblend.cli.flag_values import DataFlagValues
from jaxblend.fim_options import FIMOptions

if TYPE_CHECKING:
    from jaxblend.preprocess.tokenizer_spec import TokenizerSpec

_DEFAULT = FIMOptions()


def define_fim_flags() -> None:
    """Defines `--fim_data` and its settings, with Megatron-LM's names and defaults (those of
    `FIMOptions`)."""
    d = _DEFAULT
    flags.DEFINE_bool(
        "fim_data", False,
        "Fill-in-the-middle samples (Megatron's GPTFIMDataset): EOD-delimited segments rewritten "
        "as prefix/suffix/middle with sentinel tokens of the data's tokenizer (with "
        "--packing=best_fit, each document of a row, in its own places).",
    )
    flags.DEFINE_float("fim_rate", d.rate, "With --fim_data: probability that a segment is rewritten.")
    flags.DEFINE_float(
        "fim_spm_rate", d.spm_rate, "With --fim_data: probability that a rewrite is SPM, not PSM."
    )
    flags.DEFINE_string(
        "fim_split_sample", d.split_sample,
        "With --fim_data: token at which segments are cut into fragments, each rewritten on its own "
        "(default: none, segments are not cut).",
    )
    flags.DEFINE_float(
        "fim_fragment_rate", d.fragment_rate,
        "With --fim_split_sample: probability that a fragment is rewritten (required with it; "
        "default: none).",
    )
    flags.DEFINE_string(
        "fim_no_prefix", d.no_prefix,
        "With --fim_data: fragments whose text starts with this stay as they are (default: none).",
    )
    for name in ("prefix", "middle", "suffix", "pad", "eod"):
        flags.DEFINE_string(
            f"fim_{name}_token", getattr(d, f"{name}_token"),
            f"With --fim_data: the FIM {name.upper()} token's name.",
        )


def fim_options(values: DataFlagValues, tokenizer: TokenizerSpec | None = None) -> FIMOptions | None:
    """The `FIMOptions` of the flags' values, or None without `--fim_data`.

    Args:
      values: the flags' values.
      tokenizer: the `TokenizerSpec` of `--tokenizer_type` & co. (for data without a
        preprocessing record), or None.

    Raises:
      ValueError: a bad rate or combination (one line naming the flag), or FIM settings without
        `--fim_data`.
    """
    settings = {name: getattr(values, f"fim_{name}") for name in FIMOptions.setting_names()}
    if not values.fim_data:
        given = [f"--fim_{n}" for n, v in settings.items() if v != getattr(_DEFAULT, n)]
        if given:
            raise ValueError(f"{', '.join(given)} apply only with --fim_data: add it or drop them")
        return None
    return FIMOptions(**settings, tokenizer=tokenizer)

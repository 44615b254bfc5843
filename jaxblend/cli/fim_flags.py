"""Fill-in-the-middle flags (Megatron-LM's `--fim-*`, dashed spellings accepted) and their
`jaxblend.sources.fim.FIMOptions`.

`define_fim_flags()` is part of the schema flags (`define_schema_flags`): every program that builds
GPT batches (training, `dump_batches`, `inspect`) takes them. `fim_options(values, tokenizer)`
turns their values (`DataFlagValues`) into the schema's `fim` field, or None without `--fim_data`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from absl import flags

from jaxblend.cli.flag_values import DataFlagValues

if TYPE_CHECKING:  # the source layer loads Numba: deferred
    from jaxblend.sources.fim import FIMOptions

FIM_FIELDS = (
    "fim_rate", "fim_spm_rate", "fim_split_sample", "fim_fragment_rate", "fim_no_prefix",
    "fim_prefix_token", "fim_middle_token", "fim_suffix_token", "fim_pad_token", "fim_eod_token",
)
"""The settings of `--fim_data` (fields of `DataFlagValues`, named after their flags)."""
_DEFAULTS = {name: getattr(DataFlagValues(), name) for name in FIM_FIELDS}


def define_fim_flags() -> None:
    """Defines `--fim_data` and its settings, with Megatron-LM's names and defaults."""
    flags.DEFINE_bool(
        "fim_data", False,
        "Fill-in-the-middle samples (Megatron's GPTFIMDataset): EOD-delimited segments rewritten "
        "as prefix/suffix/middle with sentinel tokens of the data's tokenizer.",
    )
    flags.DEFINE_float("fim_rate", 0.5, "With --fim_data: probability that a segment is rewritten.")
    flags.DEFINE_float(
        "fim_spm_rate", 0.5, "With --fim_data: probability that a rewrite is SPM, not PSM."
    )
    flags.DEFINE_string(
        "fim_split_sample", None,
        "With --fim_data: token at which segments are cut into fragments, each rewritten on its own "
        "(default: none, segments are not cut).",
    )
    flags.DEFINE_float(
        "fim_fragment_rate", None,
        "With --fim_split_sample: probability that a fragment is rewritten (required with it; "
        "default: none).",
    )
    flags.DEFINE_string(
        "fim_no_prefix", None,
        "With --fim_data: fragments whose text starts with this stay as they are (default: none).",
    )
    for name, default in (
        ("prefix", "<fim_prefix>"), ("middle", "<fim_middle>"), ("suffix", "<fim_suffix>"),
        ("pad", "<fim_pad>"), ("eod", "<|endoftext|>"),
    ):
        flags.DEFINE_string(
            f"fim_{name}_token", default, f"With --fim_data: the FIM {name.upper()} token's name."
        )


def fim_options(values: DataFlagValues, tokenizer: Any = None) -> FIMOptions | None:
    """The `FIMOptions` of the flags' values, or None without `--fim_data`.

    Args:
      values: the flags' values.
      tokenizer: the `TokenizerSpec` of `--tokenizer_type` & co. (for data without a
        preprocessing record), or None.

    Raises:
      ValueError: a bad rate or combination (one line naming the flag).
    """
    if not values.fim_data:
        given = [f"--{f}" for f in FIM_FIELDS if getattr(values, f) != _DEFAULTS[f]]
        if given:
            raise ValueError(f"{', '.join(given)} apply only with --fim_data: add it or drop them")
        return None
    from jaxblend.sources.fim import FIMOptions

    return FIMOptions(
        rate=values.fim_rate,
        spm_rate=values.fim_spm_rate,
        split_sample=values.fim_split_sample,
        fragment_rate=values.fim_fragment_rate,
        no_prefix=values.fim_no_prefix,
        prefix_token=values.fim_prefix_token,
        middle_token=values.fim_middle_token,
        suffix_token=values.fim_suffix_token,
        pad_token=values.fim_pad_token,
        eod_token=values.fim_eod_token,
        tokenizer=tokenizer,
    )


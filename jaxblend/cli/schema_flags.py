"""Sample-schema flags (what a sample holds besides its tokens), Megatron-LM's fill-in-the-middle
flags `--fim-*` among them (dashed spellings accepted); their `GPTSchemaOptions` is
`jaxblend.cli.assembly.schema_options` of the flags' values, its `fim` field `fim_options` (a
`jaxblend.fim_options.FIMOptions`, also `jaxblend.sources.fim.FIMOptions`, or None without
`--fim_data`). Every program that builds GPT batches (training, `dump_batches`, `inspect`) takes
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from absl import flags

from jaxblend.cli import flag_help
from jaxblend.cli.flag_values import DataFlagValues
from jaxblend.fim_options import FIMOptions

if TYPE_CHECKING:
    from jaxblend.preprocess.tokenizer_spec import TokenizerSpec


def define_schema_flags() -> None:
    """Defines the GPT sample-schema flags, the fill-in-the-middle ones included
    (`define_fim_flags`); `--seq_length` and `--add_extra_token_to_sequence` are data
    flags (`define_data_flags`)."""
    with flag_help.group(flag_help.SCHEMA):
        define_fim_flags()
        flags.DEFINE_integer(
            "eod_id", None,
            "End-of-document token id, needed by the options below (default: the id recorded with the "
            "datasets by jaxblend.tools.preprocess, or of --tokenizer_type).",
        )
        flags.DEFINE_bool(
            "eod_mask_loss", False, "Zero the loss at EOD (target EOD; input EOD with --megatron_compat)."
        )
        flags.DEFINE_bool(
            "megatron_compat",
            False,
            "Batches equal Megatron-Core's GPTDataset.__getitem__ (loss mask, padding, positions).",
        )
        flags.DEFINE_integer(
            "pad_id", None, "With --megatron_compat: Megatron's pad token id (default: none, -1)."
        )
        flags.DEFINE_bool(
            "inter_document_masking", False, "Add cu_seqlens/max_seqlen; positions per document."
        )
        flags.DEFINE_bool("reset_position_ids", False, "Restart position ids after each EOD.")
        flags.DEFINE_bool("reset_attention_mask", False, "Number documents in segment_ids.")


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

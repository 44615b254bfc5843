"""Sample-schema flags (what a sample holds besides its tokens); their `GPTSchemaOptions` is
`jaxblend.cli.assembly.schema_options` of the flags' values."""

from __future__ import annotations

from absl import flags

from jaxblend.cli import fim_flags, flag_help


def define_schema_flags() -> None:
    """Defines the GPT sample-schema flags, the fill-in-the-middle ones included
    (`fim_flags.define_fim_flags`); `--seq_length` and `--add_extra_token_to_sequence` are data
    flags (`define_data_flags`)."""
    with flag_help.group(flag_help.SCHEMA):
        fim_flags.define_fim_flags()
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


"""Sample-schema flags (what a sample holds besides its tokens) and their `GPTSchemaOptions`."""

from __future__ import annotations

from absl import flags


def define_schema_flags() -> None:
    """Defines the GPT sample-schema flags (`--seq_length` and `--add_extra_token_to_sequence`
    are data flags: `define_data_flags`)."""
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


def schema_options_from_flags(eod_id: int | None = None):
    """The `jaxblend.sources.GPTSchemaOptions` of the flags.

    Args:
      eod_id: the end-of-document id when `--eod_id` is not given (e.g. a built-in tokenizer's, or
        the one recorded with the datasets).

    Raises:
      ValueError: an inconsistent combination (the message names the option).
    """
    from jaxblend.sources import GPTSchemaOptions

    fl = flags.FLAGS
    return GPTSchemaOptions(
        seq_length=fl.seq_length,
        add_extra_token_to_sequence=fl.add_extra_token_to_sequence,
        eod_id=fl.eod_id if fl.eod_id is not None else eod_id,
        eod_mask_loss=fl.eod_mask_loss,
        reset_position_ids=fl.reset_position_ids,
        reset_attention_mask=fl.reset_attention_mask,
        megatron_compat=fl.megatron_compat,
        pad_id=fl.pad_id,
        inter_document_masking=fl.inter_document_masking,
    )

"""Flag helpers shared by the loader-facing CLIs (dump_batches, inspect, train).

Data flags (Megatron-LM names) come from `jaxblend.flags`; this module adds the sample-schema
flags, the mock-data switch and mesh construction, and turns them into a source and a mesh.
"""

from __future__ import annotations

from absl import flags

from jaxblend import flags as data_flags
from jaxblend import mesh as mesh_lib
from jaxblend.define_once import define_once


@define_once()
def define_source_flags() -> None:
    """Defines data flags plus the GPT schema and mock flags (idempotent)."""
    data_flags.define_data_flags()
    flags.DEFINE_bool("mock_data", False, "Use synthetic samples instead of --data_path.")
    flags.DEFINE_integer("mock_num_samples", 1 << 20, "Samples of the mock source.", lower_bound=1)
    flags.DEFINE_integer("mock_vocab_size", 32000, "Vocabulary size of the mock source.")
    flags.DEFINE_integer("eod_id", None, "End-of-document token id (needed by the options below).")
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
    flags.DEFINE_enum(
        "storage_backend", "auto", ["auto", "mmap", "tensorstore"], "How .bin files are read."
    )


def schema_options_from_flags():
    """GPTSchemaOptions from the flags."""
    from jaxblend.sources.schema import GPTSchemaOptions

    fl = flags.FLAGS
    return GPTSchemaOptions(
        seq_length=fl.seq_length,
        add_extra_token_to_sequence=fl.add_extra_token_to_sequence,
        eod_id=fl.eod_id,
        eod_mask_loss=fl.eod_mask_loss,
        reset_position_ids=fl.reset_position_ids,
        reset_attention_mask=fl.reset_attention_mask,
        megatron_compat=fl.megatron_compat,
        pad_id=fl.pad_id,
        inter_document_masking=fl.inter_document_masking,
    )


def source_from_flags(split: str):
    """The source of `split` ("train", "valid", "test") described by the flags.

    Raises:
      ValueError: if the configuration has no such split.
    """
    from jaxblend.sources import MockSource, open_gpt_sources

    fl = flags.FLAGS
    options = schema_options_from_flags()
    if split.startswith("valid_") and not fl.mock_data:
        sets = validation_sources_from_flags()
        if split not in sets:
            raise ValueError(
                f"no validation set {split!r} (sets: {sorted(sets)}; valid_<k> needs "
                "--multiple_validation_sets)"
            )
        return sets[split]
    if fl.mock_data:
        return MockSource(fl.mock_num_samples, options, vocab_size=fl.mock_vocab_size, seed=fl.seed)
    sources = open_gpt_sources(
        data_flags.data_config_from_flags(), options,
        access=data_flags.data_access_from_flags(), splits=(split,),
    )
    if sources.get(split) is None:
        raise ValueError(
            f"the data configuration has no {split!r} split (check --split and --{split}_samples)"
        )
    return sources[split]


def validation_sources_from_flags() -> dict:
    """The validation source(s): `{"valid": source}`, or one per set with
    --multiple_validation_sets (`{"valid_0": ..., "valid_1": ...}` in blend order).

    Raises:
      ValueError: if the configuration has no validation split.
    """
    fl = flags.FLAGS
    if not fl.multiple_validation_sets or fl.mock_data:
        return {"valid": source_from_flags("valid")}
    from jaxblend.sources import open_validation_sets

    sets = open_validation_sets(
        data_flags.data_config_from_flags(), schema_options_from_flags(),
        access=data_flags.data_access_from_flags(), full_validation=fl.full_validation,
    )
    return {f"valid_{k}": source for k, source in enumerate(sets.values())}


def mesh_from_flags(shape: str | None, axes: str):
    """A mesh from --mesh_shape/--mesh_axes (default: one `data` axis over all devices)."""
    import jax

    if shape is None:
        shape = str(jax.device_count())
    return mesh_lib.make_mesh(shape, axes)


def batch_axes_of(mesh) -> tuple[str, ...]:
    """The batch axes of `mesh` (data and fsdp)."""
    return mesh_lib.default_batch_axes(mesh.axis_names)

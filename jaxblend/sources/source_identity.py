"""The identity of a GPT sample stream, shared by every source that serves one.

A `GPTSource` serves the same samples for the same data plan, split and schema options whichever
span index it reads through (index maps + `.idx` pointers, or a published row table), so both
carry the same fingerprint and a run may resume from one on the other.
"""

from __future__ import annotations

from jaxblend import identity
from jaxblend.sources.schema import GPTSchemaOptions


def gpt_source_fingerprint(
    data_maps: str,
    split: str,
    options: GPTSchemaOptions,
    seq_length: int,
    add_extra_token_to_sequence: bool,
    transform: dict | None = None,
    packing: str = "concat",
) -> str:
    """Fingerprint of split `split` of the data plan `data_maps` (`DataMaps.fingerprint`), its
    windows of `seq_length` (+ 1) tokens (packed rows with `packing="best_fit"`) read with
    `options` (and a window transform's `identity_fields()`, e.g. FIM's tokenizer)."""
    schema = options.identity_fields(seq_length, add_extra_token_to_sequence, packing)
    return identity.fingerprint(
        "gpt_source", 1, data_maps=data_maps, split=split, schema=schema,
        transform=identity.unless_default(transform, None),
    )

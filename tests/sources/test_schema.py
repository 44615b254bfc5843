"""GPTSchemaOptions: validation and the fields that make a source's identity."""

from __future__ import annotations

import dataclasses

import pytest

from jaxblend import identity
from jaxblend.sources.schema import GPTSchemaOptions


@dataclasses.dataclass(frozen=True)
class WithNeutralOption(GPTSchemaOptions):
    """GPTSchemaOptions plus an option added later that leaves every batch unchanged."""

    read_hint: int = 4


def test_a_new_data_neutral_option_keeps_the_identity():
    base = GPTSchemaOptions(seq_length=16, eod_id=3, eod_mask_loss=True)
    extended = WithNeutralOption(seq_length=16, eod_id=3, eod_mask_loss=True, read_hint=9)
    assert extended.identity_fields() == base.identity_fields()


@pytest.mark.parametrize(
    "change",
    [{"seq_length": 17}, {"eod_id": 4}, {"reset_position_ids": True}, {"eod_mask_loss": False},
     {"reset_attention_mask": True}, {"add_extra_token_to_sequence": False},
     {"inter_document_masking": True}, {"megatron_compat": True}],
)
def test_a_data_changing_option_changes_the_identity(change):
    base = GPTSchemaOptions(seq_length=16, eod_id=3, eod_mask_loss=True)
    changed = dataclasses.replace(base, **change)
    assert identity.fingerprint("t", 1, **changed.identity_fields()) != identity.fingerprint(
        "t", 1, **base.identity_fields()
    )


def test_options_added_later_enter_only_when_set():
    fields = GPTSchemaOptions(seq_length=16).identity_fields()
    for name in ("megatron_compat", "pad_id", "inter_document_masking"):
        assert fields[name] is identity.OMIT
    assert GPTSchemaOptions(seq_length=16, megatron_compat=True, pad_id=7).identity_fields()["pad_id"] == 7


def test_eod_options_need_an_eod_id():
    with pytest.raises(ValueError, match="eod_id is required"):
        GPTSchemaOptions(seq_length=8, reset_position_ids=True)

"""GPTSchemaOptions: validation and the fields that make a source's identity."""

from __future__ import annotations

import dataclasses

import pytest

from jaxblend import identity
from jaxblend.sources.schema import GPTSchemaOptions, window_length


@dataclasses.dataclass(frozen=True)
class WithNeutralOption(GPTSchemaOptions):
    """GPTSchemaOptions plus an option added later that leaves every batch unchanged."""

    read_hint: int = 4


def test_a_new_data_neutral_option_keeps_the_identity():
    base = GPTSchemaOptions(eod_id=3, eod_mask_loss=True)
    extended = WithNeutralOption(eod_id=3, eod_mask_loss=True, read_hint=9)
    assert extended.identity_fields(16, True) == base.identity_fields(16, True)


@pytest.mark.parametrize(
    "change",
    [{"eod_id": 4}, {"reset_position_ids": True}, {"eod_mask_loss": False},
     {"reset_attention_mask": True}, {"inter_document_masking": True}, {"megatron_compat": True}],
)
def test_a_data_changing_option_changes_the_identity(change):
    base = GPTSchemaOptions(eod_id=3, eod_mask_loss=True)
    changed = dataclasses.replace(base, **change)
    assert identity.fingerprint("t", 1, **changed.identity_fields(16, True)) != identity.fingerprint(
        "t", 1, **base.identity_fields(16, True)
    )


def test_options_added_later_enter_only_when_set():
    fields = GPTSchemaOptions().identity_fields(16, True)
    for name in ("megatron_compat", "pad_id", "inter_document_masking"):
        assert fields[name] is identity.OMIT
    assert GPTSchemaOptions(megatron_compat=True, pad_id=7).identity_fields(16, True)["pad_id"] == 7


def test_eod_options_need_an_eod_id():
    with pytest.raises(ValueError, match="eod_id is required"):
        GPTSchemaOptions(reset_position_ids=True)


def test_the_window_enters_the_identity():  # seq_length and the extra token: the config's
    options = GPTSchemaOptions(eod_id=3)
    fields = options.identity_fields(16, True)
    assert fields["seq_length"] == 16 and fields["add_extra_token_to_sequence"] is True
    assert options.identity_fields(17, True) != fields
    assert options.identity_fields(16, False) != fields


def test_window_length():
    assert window_length(16, True) == 17 and window_length(16, False) == 16
    with pytest.raises(ValueError, match="seq_length must be an integer >= 1, got 0"):
        window_length(0, True)

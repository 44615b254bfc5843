"""Megatron-LM spellings rewritten into absl ones (`jaxblend.cli.megatron_argv`)."""

from __future__ import annotations

from jaxblend.cli import steps
from jaxblend.cli.megatron_argv import normalize_argv

DEFINED = {"data_path", "seq_length", "rampup_batch_size", "add_extra_token_to_sequence", "split"}


def test_dashes_lists_and_negations():
    argv = [
        "prog", "--data-path", "30", "/d/a", "70", "/d/b", "--seq-length", "2048",
        "--rampup-batch-size", "32", "32", "1000", "--no-add-extra-token-to-sequence",
        "--split=969,30,1",
    ]
    assert normalize_argv(argv, DEFINED, steps.MEGATRON_NARGS) == [
        "prog", "--data_path=30,/d/a,70,/d/b", "--seq_length", "2048",
        "--rampup_batch_size=32,32,1000", "--noadd_extra_token_to_sequence", "--split=969,30,1",
    ]


def test_unknown_flags_and_everything_after_a_bare_double_dash_are_left_alone():
    argv = ["prog", "--not-ours", "x", "--", "--data-path", "a"]
    assert normalize_argv(argv, DEFINED, ("data_path",)) == argv

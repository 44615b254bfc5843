"""`run_config_from_flags().config`: the `GPTDataConfig` of the data flags (blends in every
spelling; the sample counts not given derive from the step-plan flags)."""

from __future__ import annotations

import pytest

from jaxblend import cli


@pytest.fixture
def fl(fl):
    fl.data_path, fl.seq_length, fl.train_samples = ["1 /d/a"], 16, 10
    return fl


def test_flags_accept_list_and_string(fl):
    fl.data_path = ["30 /d/a 70 /d/b"]
    config = cli.run_config_from_flags().config
    assert tuple(config.blend) == ("30", "/d/a", "70", "/d/b")
    assert config.num_samples == (10, 4 * 16, 0)  # --eval_iters x --global_batch_size; test 0
    fl.data_path = ["30", "/d/a", "70", "/d/b"]
    assert tuple(cli.run_config_from_flags().config.blend) == ("30", "/d/a", "70", "/d/b")


def test_default_blend_only_without_a_data_path(fl):
    assert tuple(cli.run_config_from_flags(default_blend=("/d/x",)).config.blend) == ("1", "/d/a")
    fl.data_path = None
    assert tuple(cli.run_config_from_flags(default_blend=("/d/x",)).config.blend) == ("/d/x",)
    with pytest.raises(ValueError, match="give --data_path"):
        cli.run_config_from_flags()


def test_missing_seq_length_names_the_flag(fl):
    fl.seq_length = None
    with pytest.raises(ValueError, match="--seq_length is required"):
        cli.run_config_from_flags()

"""`data_config_from_flags`: the `GPTDataConfig` of the data flags (blends in every spelling)."""

from __future__ import annotations

import pytest

from jaxblend.cli import data_flags


@pytest.fixture
def fl(fl):
    fl.data_path, fl.seq_length, fl.train_samples = ["1 /d/a"], 16, 10
    return fl


def test_flags_accept_list_and_string(fl):
    fl.data_path = ["30 /d/a 70 /d/b"]
    config = data_flags.data_config_from_flags()
    assert tuple(config.blend) == ("30", "/d/a", "70", "/d/b")
    assert config.num_samples == (10, None, None)
    fl.data_path = ["30", "/d/a", "70", "/d/b"]
    assert tuple(data_flags.data_config_from_flags().blend) == ("30", "/d/a", "70", "/d/b")


def test_default_blend_only_without_a_data_path(fl):
    assert tuple(data_flags.data_config_from_flags(default_blend=("/d/x",)).blend) == ("1", "/d/a")
    fl.data_path = None
    assert tuple(data_flags.data_config_from_flags(default_blend=("/d/x",)).blend) == ("/d/x",)
    with pytest.raises(ValueError, match="give --data_path"):
        data_flags.data_config_from_flags()


def test_missing_seq_length_names_the_flag(fl):
    fl.seq_length = None
    with pytest.raises(ValueError, match="--seq_length is required"):
        data_flags.data_config_from_flags()

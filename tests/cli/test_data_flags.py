"""The data flags configure process-wide storage defaults as well as the data config."""

from __future__ import annotations

import pytest

from jaxblend.cli import data_flags
from jaxblend.storage import identity_memo


@pytest.fixture
def data(fl, monkeypatch):
    fl.data_path, fl.seq_length, fl.train_samples = ["1 /d/a"], 16, 10
    monkeypatch.setattr(identity_memo, "_shared_url", None)
    return fl


def test_bucket_index_cache_shares_the_identity_memo(data):
    data.data_cache_path = "gs://b/run1/index_cache/"
    data_flags.data_config_from_flags()
    assert identity_memo._shared_url == "gs://b/run1/index_cache/identity/"
    data.data_cache_path = "/local/cache"
    data_flags.data_config_from_flags()
    assert identity_memo._shared_url is None


def test_flags_accept_list_and_string(data):
    data.data_path = ["30 /d/a 70 /d/b"]
    config = data_flags.data_config_from_flags()
    assert config.blend == ("30", "/d/a", "70", "/d/b")
    assert config.num_samples == (10, None, None)
    data.data_path = ["30", "/d/a", "70", "/d/b"]
    assert data_flags.data_config_from_flags().blend == ("30", "/d/a", "70", "/d/b")


def test_default_blend_only_without_a_data_path(data):
    assert data_flags.data_config_from_flags(default_blend=("/d/x",)).blend == ("1", "/d/a")
    data.data_path = None
    assert data_flags.data_config_from_flags(default_blend=("/d/x",)).blend == ("/d/x",)
    with pytest.raises(ValueError, match="give --data_path"):
        data_flags.data_config_from_flags()


def test_missing_seq_length_names_the_flag(data):
    data.seq_length = None
    with pytest.raises(ValueError, match="--seq_length is required"):
        data_flags.data_config_from_flags()

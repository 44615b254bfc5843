"""The data flags configure process-wide storage defaults as well as the data config."""

from __future__ import annotations

import pytest

from jaxblend.cli import data_flags
from jaxblend.storage import identity_memo


@pytest.fixture
def fl(fl, monkeypatch):
    fl.data_path, fl.seq_length, fl.train_samples = ["1 /d/a"], 16, 10
    monkeypatch.setattr(identity_memo, "_shared_url", None)
    return fl


def test_bucket_index_cache_shares_the_identity_memo(fl):
    fl.data_cache_path = "gs://b/run1/index_cache/"
    data_flags.data_config_from_flags()
    assert identity_memo._shared_url == "gs://b/run1/index_cache/identity/"
    fl.data_cache_path = "/local/cache"
    data_flags.data_config_from_flags()
    assert identity_memo._shared_url is None

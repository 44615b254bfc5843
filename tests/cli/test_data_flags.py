"""The data flags configure process-wide storage defaults as well as the data config."""

from __future__ import annotations

import pytest
from absl import flags

from jaxblend import flags as data_flags
from jaxblend.storage import identity_memo


@pytest.fixture
def fl(monkeypatch):
    data_flags.define_data_flags()
    fl = flags.FLAGS
    if not fl.is_parsed():
        fl(["test"])
    names = ("data_path", "seq_length", "train_samples", "data_cache_path")
    saved = {k: fl[k].value for k in names}
    fl.data_path, fl.seq_length, fl.train_samples = ["1 /d/a"], 16, 10
    monkeypatch.setattr(identity_memo, "_shared_url", None)
    yield fl
    for k, v in saved.items():
        fl[k].value = v


def test_bucket_index_cache_shares_the_identity_memo(fl):
    fl.data_cache_path = "gs://b/run1/index_cache/"
    data_flags.data_config_from_flags()
    assert identity_memo._shared_url == "gs://b/run1/index_cache/identity/"
    fl.data_cache_path = "/local/cache"
    data_flags.data_config_from_flags()
    assert identity_memo._shared_url is None

"""The data flags: their `GPTDataConfig`, their `DataAccess`, and the process-wide storage
defaults they still set."""

from __future__ import annotations

import pytest

from jaxblend import cli
from jaxblend.access import DataAccess
from jaxblend.cli import data_flags
from jaxblend.storage import identity_memo


@pytest.fixture
def data(fl, monkeypatch):
    fl.data_path, fl.seq_length, fl.train_samples = ["1 /d/a"], 16, 10
    monkeypatch.setattr(identity_memo, "_shared_url", None)
    for name in ("JAXBLEND_INDEX_MIRROR", "JAXBLEND_IDENTITY_CACHE", "JAXBLEND_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
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


def test_data_access_from_storage_and_cache_flags(data):
    data.s3_endpoint, data.s3_region = "http://localhost:9000", "eu-west-1"
    data.storage_concurrency, data.storage_retries, data.storage_timeout = 7, 2, 30.0
    data.data_cache_path, data.data_cache_mirror = "gs://b/run1/maps/", "/tmp/mirror"
    data.data_cache_wait = 12.0
    data.storage_backend = "tensorstore"
    access = cli.data_access_from_flags()
    assert isinstance(access, DataAccess)
    store = access.object_store
    assert (store.s3_endpoint, store.s3_region) == ("http://localhost:9000", "eu-west-1")
    assert (store.request_concurrency, store.max_retries, store.request_timeout) == (7, 2, 30.0)
    assert access.maps.location == "gs://b/run1/maps/"
    assert (access.maps.mirror, access.maps.wait_seconds) == ("/tmp/mirror", 12.0)
    assert access.identity.shared_url == "gs://b/run1/maps/identity/"
    assert access.backend == "tensorstore"


def test_data_access_of_a_local_cache_and_the_default_location(data, monkeypatch):
    monkeypatch.setenv("JAXBLEND_INDEX_MIRROR", "/env/mirror")
    access = cli.data_access_from_flags(default_map_location="/run/index_cache")
    assert access.maps.location == "/run/index_cache"
    assert access.maps.mirror == "/env/mirror"
    assert access.identity.shared_url is None
    data.data_cache_path = "/flag/cache"
    assert cli.data_access_from_flags("/run/index_cache").maps.location == "/flag/cache"


def test_bad_cache_wait_names_the_flags(data):
    data["data_cache_wait"].value = 0.0
    with pytest.raises(ValueError, match="--data_cache_path/--data_cache_mirror/--data_cache_wait"):
        cli.data_access_from_flags()

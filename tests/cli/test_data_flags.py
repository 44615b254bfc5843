"""The data flags give the data configuration and, separately, a `DataAccess` (storage, map store,
identity memo); neither sets process state."""

from __future__ import annotations

import pytest

from jaxblend import cli
from jaxblend.access import DataAccess
from jaxblend.cli.assembly import data_access_from_flags


@pytest.fixture
def fl(fl, monkeypatch):
    fl.data_path, fl.seq_length, fl.train_samples = ["1 /d/a"], 16, 10
    for name in ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
                 "JAXBLEND_IDENTITY_CACHE", "JAXBLEND_INDEX_MIRROR"):
        monkeypatch.delenv(name, raising=False)
    return fl


def test_bucket_index_cache_shares_the_identity_memo(fl):
    fl.data_cache_path = "gs://b/run1/index_cache/"
    access = data_access_from_flags()
    assert access.identity_store().shared_url == "gs://b/run1/index_cache/identity/"
    fl.data_cache_path = "/local/cache"
    assert data_access_from_flags().identity_store().shared_url is None


def test_every_storage_and_cache_flag_is_in_the_access(fl, monkeypatch):
    fl.data_cache_path, fl.data_cache_mirror, fl.data_cache_wait = "s3://b/maps", "/mirror", 7.5
    fl.s3_endpoint, fl.storage_retries, fl.storage_timeout = "http://127.0.0.1:9000", 1, 12.0
    access = data_access_from_flags()
    assert isinstance(access, DataAccess)
    assert (access.maps.location, access.maps.mirror, access.maps.wait_seconds) == (
        "s3://b/maps", "/mirror", 7.5)
    assert access.object_store.s3_endpoint == "http://127.0.0.1:9000"
    assert (access.object_store.max_retries, access.object_store.request_timeout) == (1, 12.0)
    # The data configuration carries none of it, and reading the flags sets nothing.
    config = cli.run_config_from_flags().config
    assert not hasattr(config, "cache_dir")
    assert DataAccess.from_env().object_store.s3_endpoint is None


def test_mirror_flag_over_the_environment(fl, monkeypatch):
    fl.data_cache_path, fl.data_cache_mirror = "gs://b/maps", None
    monkeypatch.setenv("JAXBLEND_INDEX_MIRROR", "/env-mirror")
    assert data_access_from_flags().maps.mirror == "/env-mirror"
    fl.data_cache_mirror = "/flag-mirror"
    assert data_access_from_flags().maps.mirror == "/flag-mirror"

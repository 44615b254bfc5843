"""The storage and cache flags make a `DataAccess` (`jaxblend.cli.data_access_from_flags`)."""

from __future__ import annotations

import pytest

from jaxblend import cli
from jaxblend.access import DataAccess


@pytest.fixture
def data(fl, monkeypatch):
    fl.data_path, fl.seq_length = ["1 /d/a"], 16
    for name in ("JAXBLEND_INDEX_MIRROR", "JAXBLEND_IDENTITY_CACHE", "JAXBLEND_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return fl


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

"""`DataAccess`: validated, picklable, read from the environment once (by `from_env` only)."""

from __future__ import annotations

import pickle

import pytest

from jaxblend.access import DataAccess, IdentityStoreOptions, MapStoreOptions, ObjectStoreOptions


def _full() -> DataAccess:
    return DataAccess(
        object_store=ObjectStoreOptions(s3_endpoint="http://127.0.0.1:9", max_retries=1,
                                        request_timeout=3.0),
        maps=MapStoreOptions(location="s3://b/maps", mirror="/m", wait_seconds=5, builder=False,
                             verify="full", read_megatron_cache=False),
        identity=IdentityStoreOptions(local_dir="/ids"),
        backend="tensorstore",
    )


def test_pickles_and_round_trips():
    access = _full()
    again = pickle.loads(pickle.dumps(access))
    assert again == access and hash(again) == hash(access)
    assert again.identity_store().shared_url == "s3://b/maps/identity/"
    assert again.with_maps(location=None).maps.location is None
    assert again.maps.location == "s3://b/maps"  # with_maps copies


def test_environment_is_read_by_from_env_only(monkeypatch):
    monkeypatch.setenv("JAXBLEND_S3_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("JAXBLEND_IDENTITY_CACHE", "off")
    monkeypatch.setenv("JAXBLEND_INDEX_MIRROR", "/mirror")
    plain = DataAccess()
    assert plain.object_store.s3_endpoint is None and plain.identity.enabled
    assert plain.maps.mirror is None
    env = DataAccess.from_env()
    assert env.object_store.s3_endpoint == "http://127.0.0.1:1"
    assert not env.identity.enabled and env.maps.mirror == "/mirror"
    monkeypatch.setenv("JAXBLEND_S3_ENDPOINT", "http://127.0.0.1:2")
    assert env.object_store.s3_endpoint == "http://127.0.0.1:1"  # evaluated once, at from_env


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: DataAccess(backend="disk"), ValueError, "backend"),
        (lambda: DataAccess(maps="/tmp/maps"), TypeError, "MapStoreOptions"),
        (lambda: MapStoreOptions(wait_seconds=0), ValueError, "wait_seconds"),
        (lambda: MapStoreOptions(verify="some"), ValueError, "verify"),
        (lambda: IdentityStoreOptions(shared_url="/local"), ValueError, "bucket URL"),
    ],
)
def test_bad_options_are_refused(make, error, match):
    with pytest.raises(error, match=match):
        make()

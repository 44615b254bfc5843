"""The map store at a bucket URL, on real local servers (fake-gcs-server and moto S3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers_data import random_infos

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.index import data_maps
from jaxblend.map_store import bucket as bucket_cache
from jaxblend.map_store import data_maps_status, load_or_build_data_maps
from jaxblend.map_store import entries as cache


@pytest.fixture
def url(object_store, request):
    return object_store.prefix_url(f"bucket-cache/{request.node.name}")


CONFIG = index.GPTDataConfig(
    blend=["40", "/d/a", "60", "/d/b"], split="90,10,0", seq_length=16, num_samples=(200, 20, 0)
)


@pytest.fixture
def host(tmp_path, url):
    """The `DataAccess` of host `name` (own mirror directory), builder or not."""

    def access(name: str, builder: bool, wait: float = 30.0) -> DataAccess:
        return DataAccess.from_env(maps=MapStoreOptions(
            location=url, wait_seconds=wait, poll_seconds=0.05, builder=builder,
            mirror=str(tmp_path / name),
        ))

    return access


def _maps(access: DataAccess) -> index.DataMaps:
    return load_or_build_data_maps(CONFIG, _infos(), access)


def _infos():
    return random_infos(11, {"/d/a": (50, 300), "/d/b": (80, 90)})


def _bucket(access: DataAccess) -> bucket_cache.Bucket:
    return bucket_cache.Bucket(access.maps.location, access.object_store)


def _no_build(*args, **kwargs):
    raise AssertionError("a reader built the maps instead of reading them from the bucket")


def _arrays(p: index.DataMaps) -> dict[str, np.ndarray]:
    loaded = cache.load(*p.cache_path.rsplit("/", 1))
    assert loaded is not None
    return loaded[0]


def test_builder_publishes_and_another_host_reads_the_same_maps(host, monkeypatch):
    builder = host("builder", builder=True)
    built = _maps(builder)
    key = built.cache_path.rsplit("/", 1)[1]
    assert _bucket(builder).committed(key)

    reader = host("reader", builder=False)
    monkeypatch.setattr(data_maps, "build_arrays", _no_build)
    read = _maps(reader)
    assert read.fingerprint == built.fingerprint
    assert "reader" in read.cache_path and "builder" in built.cache_path
    a, b = _arrays(built), _arrays(read)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_download_in_small_pieces(host, monkeypatch):
    monkeypatch.setattr(bucket_cache, "DOWNLOAD_CHUNK", 1000)
    monkeypatch.setattr(bucket_cache, "DOWNLOAD_WINDOW", 3)
    built = _maps(host("builder", builder=True))
    read = _maps(host("reader", builder=False))
    a, b = _arrays(built), _arrays(read)
    assert max(Path(built.cache_path, f"{n}.npy").stat().st_size for n in a) > 3000
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_truncated_array_is_refused(url, host, object_store):
    built = _maps(host("builder", builder=True))
    key = built.cache_path.rsplit("/", 1)[1]
    name = max(_arrays(built), key=lambda n: _arrays(built)[n].nbytes)
    prefix = url.split("/", 3)[3]
    data = (Path(built.cache_path) / f"{name}.npy").read_bytes()
    object_store.write(f"{prefix}/{key}/{name}.npy", data[:-10])

    with pytest.raises(ValueError, match=r"shorter than the \d+ bytes its manifest records"):
        _maps(host("reader", builder=False))


def test_entry_without_commit_marker_is_never_read(url, host, object_store, monkeypatch):
    key = _maps(host("builder", builder=True)).cache_path.rsplit("/", 1)[1]
    prefix = url.split("/", 3)[3]
    object_store.write(f"{prefix}/{key}/{bucket_cache.MARKER}", None)  # as if it died before it

    monkeypatch.setattr(data_maps, "build_arrays", _no_build)
    with pytest.raises(TimeoutError) as err:
        _maps(host("reader", builder=False, wait=0.3))
    message = str(err.value)
    assert bucket_cache.entry_url(url, key) in message and "--data_cache_wait" in message


def test_builder_overwrites_a_half_published_entry(url, host, object_store):
    key = _maps(host("first", builder=True)).cache_path.rsplit("/", 1)[1]
    prefix = url.split("/", 3)[3]
    object_store.write(f"{prefix}/{key}/{bucket_cache.MARKER}", None)
    object_store.write(f"{prefix}/{key}/{cache.MANIFEST}", b"{half")

    rebuilt = _maps(host("second", builder=True))
    assert "second" in rebuilt.cache_path
    third = host("third", builder=False, wait=5)
    assert _bucket(third).fetch(key, bucket_cache.mirror_dir(url, third.maps))


def test_committed_entry_with_changed_bytes_is_refused(url, host, object_store):
    built = _maps(host("builder", builder=True))
    key = built.cache_path.rsplit("/", 1)[1]
    name = next(n for n in sorted(_arrays(built)) if _arrays(built)[n].size)
    prefix = url.split("/", 3)[3]
    tampered = bytearray((Path(built.cache_path) / f"{name}.npy").read_bytes())
    tampered[-1] ^= 0xFF
    object_store.write(f"{prefix}/{key}/{name}.npy", bytes(tampered))

    with pytest.raises(ValueError) as err:
        _maps(host("reader", builder=False))
    assert bucket_cache.entry_url(url, key) in str(err.value)
    assert "fails its checks" in str(err.value)


def test_status_sees_the_bucket_entry(url, host):
    from jaxblend.index.estimate import estimate_plan

    builder = host("builder", builder=True)
    estimate = estimate_plan(CONFIG, _infos())
    assert not data_maps_status(estimate.fingerprint, estimate.specs, builder).cached
    key = _maps(builder).cache_path.rsplit("/", 1)[1]
    after = data_maps_status(estimate.fingerprint, estimate.specs, host("inspector", builder=False))
    assert after.cached and after.problems == []
    assert after.where == bucket_cache.entry_url(url, key)

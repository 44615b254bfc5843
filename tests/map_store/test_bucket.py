"""The index-map cache at a bucket URL, on real local servers (fake-gcs-server and moto S3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers_data import random_infos

from jaxblend import index
from jaxblend.index import bucket_cache, cache, data_maps


@pytest.fixture(scope="module")
def infos():
    return random_infos(11, {"/d/a": (50, 300), "/d/b": (80, 90)})


@pytest.fixture
def url(object_store, request):
    return object_store.prefix_url(f"bucket-cache/{request.node.name}")


def _config(url: str) -> index.GPTDataConfig:
    return index.GPTDataConfig(
        blend=["40", "/d/a", "60", "/d/b"], split="90,10,0", seq_length=16,
        num_samples=(200, 20, 0), cache_dir=url,
    )


@pytest.fixture
def host(tmp_path):
    """Makes this process act as host `name` (own mirror directory), builder or not."""
    saved = bucket_cache.process_default()

    def set_host(name: str, builder: bool, wait: float = 30.0) -> None:
        bucket_cache.set_process_default(bucket_cache.BucketCacheOptions(
            wait_seconds=wait, poll_seconds=0.05, builder=builder, mirror_root=str(tmp_path / name)
        ))

    yield set_host
    bucket_cache.set_process_default(saved)


def _no_build(*args, **kwargs):
    raise AssertionError("a reader built the maps instead of reading them from the bucket")


def _arrays(p: index.DataMaps) -> dict[str, np.ndarray]:
    loaded = cache.load(*p.cache_path.rsplit("/", 1))
    assert loaded is not None
    return loaded[0]


def test_builder_publishes_and_another_host_reads_the_same_maps(url, infos, host, monkeypatch):
    host("builder", builder=True)
    built = index.build_data_maps(_config(url), infos)
    key = built.cache_path.rsplit("/", 1)[1]
    assert bucket_cache.committed(url, key)

    host("reader", builder=False)
    monkeypatch.setattr(data_maps, "_build_arrays", _no_build)
    read = index.build_data_maps(_config(url), infos)
    assert read.fingerprint == built.fingerprint
    assert "reader" in read.cache_path and "builder" in built.cache_path
    a, b = _arrays(built), _arrays(read)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_download_in_small_pieces(url, infos, host, monkeypatch):
    monkeypatch.setattr(bucket_cache, "DOWNLOAD_CHUNK", 1000)
    monkeypatch.setattr(bucket_cache, "DOWNLOAD_WINDOW", 3)
    host("builder", builder=True)
    built = index.build_data_maps(_config(url), infos)
    host("reader", builder=False)
    read = index.build_data_maps(_config(url), infos)
    a, b = _arrays(built), _arrays(read)
    assert max(Path(built.cache_path, f"{n}.npy").stat().st_size for n in a) > 3000
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_truncated_array_is_refused(url, infos, host, object_store):
    host("builder", builder=True)
    built = index.build_data_maps(_config(url), infos)
    key = built.cache_path.rsplit("/", 1)[1]
    name = max(_arrays(built), key=lambda n: _arrays(built)[n].nbytes)
    prefix = url.split("/", 3)[3]
    data = (Path(built.cache_path) / f"{name}.npy").read_bytes()
    object_store.write(f"{prefix}/{key}/{name}.npy", data[:-10])

    host("reader", builder=False)
    with pytest.raises(ValueError, match=r"shorter than the \d+ bytes its manifest records"):
        index.build_data_maps(_config(url), infos)


def test_entry_without_commit_marker_is_never_read(url, infos, host, object_store, monkeypatch):
    host("builder", builder=True)
    key = index.build_data_maps(_config(url), infos).cache_path.rsplit("/", 1)[1]
    prefix = url.split("/", 3)[3]
    object_store.write(f"{prefix}/{key}/{bucket_cache.MARKER}", None)  # as if it died before it

    host("reader", builder=False, wait=0.3)
    monkeypatch.setattr(data_maps, "_build_arrays", _no_build)
    with pytest.raises(TimeoutError) as err:
        index.build_data_maps(_config(url), infos)
    message = str(err.value)
    assert bucket_cache.entry_url(url, key) in message and "--data_cache_wait" in message


def test_builder_overwrites_a_half_published_entry(url, infos, host, object_store):
    host("first", builder=True)
    key = index.build_data_maps(_config(url), infos).cache_path.rsplit("/", 1)[1]
    prefix = url.split("/", 3)[3]
    object_store.write(f"{prefix}/{key}/{bucket_cache.MARKER}", None)
    object_store.write(f"{prefix}/{key}/{cache.MANIFEST}", b"{half")

    host("second", builder=True)
    rebuilt = index.build_data_maps(_config(url), infos)
    assert "second" in rebuilt.cache_path
    host("third", builder=False, wait=5)
    assert bucket_cache.fetch(url, key, bucket_cache.mirror_dir(url))


def test_committed_entry_with_changed_bytes_is_refused(url, infos, host, object_store):
    host("builder", builder=True)
    built = index.build_data_maps(_config(url), infos)
    key = built.cache_path.rsplit("/", 1)[1]
    name = next(n for n in sorted(_arrays(built)) if _arrays(built)[n].size)
    prefix = url.split("/", 3)[3]
    tampered = bytearray((Path(built.cache_path) / f"{name}.npy").read_bytes())
    tampered[-1] ^= 0xFF
    object_store.write(f"{prefix}/{key}/{name}.npy", bytes(tampered))

    host("reader", builder=False)
    with pytest.raises(ValueError) as err:
        index.build_data_maps(_config(url), infos)
    assert bucket_cache.entry_url(url, key) in str(err.value)
    assert "fails its checks" in str(err.value)


def test_local_cache_path_is_not_a_bucket(tmp_path):
    assert not bucket_cache.is_url(str(tmp_path))
    assert not bucket_cache.is_url(f"file://{tmp_path}")
    assert bucket_cache.is_url("gs://b/cache") and bucket_cache.is_url("s3://b/cache")


def test_estimate_sees_the_bucket_entry(url, infos, host):
    from jaxblend.index.estimate import estimate_plan

    host("builder", builder=True)
    before = estimate_plan(_config(url), infos)
    assert not before.cached
    key = index.build_data_maps(_config(url), infos).cache_path.rsplit("/", 1)[1]
    host("inspector", builder=False)
    after = estimate_plan(_config(url), infos)
    assert after.cached and after.problems == []
    assert after.cache_path == bucket_cache.entry_url(url, key)

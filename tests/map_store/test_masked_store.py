"""BERT/T5 sample indices in the map store: miss then hit, corruption, entries that are not an
index, pickling as the entry's recipe (moved from tests/index), and a bucket store: published once
by the builder, read by a non-builder."""

from __future__ import annotations

import logging
import pickle
import shutil

import numpy as np
import pytest

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.index import masked_maps
from jaxblend.map_store import bucket, load_or_build_masked_index
from jaxblend.map_store import entries as cache

BOUNDS = np.array([0, 3, 5, 9, 10, 14], np.int64)
LENGTHS = np.array([5, 7, 2, 9, 4, 3, 8, 6, 5, 2, 7, 7, 3, 9], np.int32)


def _info(fingerprint="content-a", name="/data/docs"):
    return index.DatasetInfo(name, LENGTHS, BOUNDS, fingerprint)


def _config(**kw):
    fields = {"split": "80,20,0", "seed": 42, "max_length": 12, "short_sequence_probability": 0.5}
    return index.MaskedIndexConfig(**{**fields, **kw})


def _cached(config, info, path, split="train", verify="summary"):
    access = DataAccess(maps=MapStoreOptions(location=str(path), verify=verify))
    return load_or_build_masked_index(config, info, split, access)


def _count_builds(monkeypatch):
    calls = []
    real = masked_maps.build_masked_sample_index

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(masked_maps, "build_masked_sample_index", counting)
    return calls


def test_cache_miss_then_hit(tmp_path, monkeypatch):
    calls = _count_builds(monkeypatch)
    config = _config()
    first = _cached(config, _info(), tmp_path)
    assert len(calls) == 1
    assert first.cache_path == str(tmp_path / first.fingerprint)
    key = first.fingerprint
    assert cache.check_dir(cache.entry_path(str(tmp_path), key), key) is None
    # a later start (the arrays of the dataset are never needed) loads the entry memory-mapped
    lazy = index.DatasetInfo("/elsewhere/docs", _fail, _fail, "content-a")
    second = _cached(config, lazy, tmp_path, verify="full")
    assert len(calls) == 1
    assert isinstance(second.rows, np.memmap)
    np.testing.assert_array_equal(second.rows, first.rows)
    assert second.fingerprint == first.fingerprint and second.cache_path == first.cache_path
    # changed content misses
    _cached(config, _info("content-b"), tmp_path)
    assert len(calls) == 2


def _fail():
    raise AssertionError("the dataset's arrays were read although the cache holds the index")


def test_corrupt_entry_is_moved_aside_and_rebuilt(tmp_path, monkeypatch, caplog):
    config = _config()
    first = _cached(config, _info(), tmp_path)
    expected = np.array(first.rows)  # the entry is memory-mapped: copy before corrupting it
    path = tmp_path / first.fingerprint / f"{masked_maps.ROWS}.npy"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    calls = _count_builds(monkeypatch)
    with caplog.at_level(logging.WARNING):
        again = _cached(config, _info(), tmp_path)
    assert len(calls) == 1 and "corrupt" in caplog.text
    np.testing.assert_array_equal(again.rows, expected)
    key = first.fingerprint
    assert cache.check_dir(cache.entry_path(str(tmp_path), key), key) is None


def test_entry_that_is_not_a_sample_index_is_rebuilt(tmp_path, monkeypatch, caplog):
    config = _config()
    key = masked_maps.masked_index_key(config, _info(), "train")
    cache.save(str(tmp_path), key, {masked_maps.ROWS: np.zeros((4, 2), np.int32)}, {})
    calls = _count_builds(monkeypatch)
    with caplog.at_level(logging.WARNING):
        built = _cached(config, _info(), tmp_path)
    assert len(calls) == 1 and "not a sample index" in caplog.text
    assert built.rows.shape[1] == 3 and built.rows.dtype == np.int64
    assert cache.check_dir(cache.entry_path(str(tmp_path), key), key) is None


def test_pickled_cached_index_reloads_its_entry(tmp_path):
    built = _cached(_config(), _info(), tmp_path)
    blob = pickle.dumps(built)
    assert len(blob) < 1000  # the entry's name, not its rows
    restored = pickle.loads(blob)
    assert isinstance(restored.rows, np.memmap) and restored.fingerprint == built.fingerprint
    np.testing.assert_array_equal(restored.rows, built.rows)
    shutil.rmtree(built.cache_path)
    with pytest.raises(ValueError, match="vanished or is corrupt"):
        pickle.loads(blob)


def test_bucket_store_publishes_once_and_a_non_builder_reads_it(object_store, tmp_path, monkeypatch):
    url = object_store.prefix_url(f"masked-maps/{tmp_path.name}")

    def host(name, builder, wait=30.0):
        return DataAccess.from_env(maps=MapStoreOptions(
            location=url, mirror=str(tmp_path / name), builder=builder, wait_seconds=wait,
            poll_seconds=0.05,
        ))

    config = _config(num_samples=20)
    # A non-builder never builds: with nothing published it waits, then names the entry.
    key = masked_maps.masked_index_key(config, _info(), "train")
    with pytest.raises(TimeoutError, match="--data_cache_wait") as err:
        load_or_build_masked_index(config, _info(), "train", host("early", builder=False, wait=0.2))
    assert bucket.entry_url(url, key) in str(err.value)

    calls = _count_builds(monkeypatch)
    built = load_or_build_masked_index(config, _info(), "train", host("builder", builder=True))
    assert len(calls) == 1 and built.fingerprint == key
    assert bucket.Bucket(url, host("x", False).object_store).committed(key)

    lazy = index.DatasetInfo("/elsewhere/docs", _fail, _fail, "content-a")
    read = load_or_build_masked_index(config, lazy, "train", host("reader", builder=False))
    assert len(calls) == 1  # published once, read by the other host without building
    assert "reader" in read.cache_path and isinstance(read.rows, np.memmap)
    np.testing.assert_array_equal(read.rows, built.rows)
    restored = pickle.loads(pickle.dumps(read))  # e.g. into a Grain worker: the mirror entry
    np.testing.assert_array_equal(restored.rows, built.rows)

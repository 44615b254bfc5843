"""The map store: GPT data maps cached in a local directory (moved from tests/index), subsets of
splits served from a whole-plan entry, corrupt entries rebuilt, concurrent builders."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os

import numpy as np
import pytest
from helpers_data import dataset_info, three_dataset_config, three_dataset_infos

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import entries as cache
from jaxblend.map_store import load_or_build_data_maps


@pytest.fixture(scope="module")
def infos():
    return three_dataset_infos()


_config = three_dataset_config


def _local(path) -> DataAccess:
    return DataAccess(maps=MapStoreOptions(location=str(path)))


def _cached(config, infos, path, splits=None):
    return load_or_build_data_maps(config, infos, _local(path), splits)


class TestSplitSubset:
    def test_subset_equals_the_whole_plan(self, infos, tmp_path):
        whole = index.build_data_maps(_config(), infos)
        only = _cached(_config(), infos, tmp_path, ("train",))
        assert only.fingerprint == whole.fingerprint and only.built == ("train",)
        for field in ("dataset_index", "dataset_sample_index"):
            np.testing.assert_array_equal(
                getattr(only.split("train"), field), getattr(whole.split("train"), field)
            )
        with pytest.raises(ValueError, match="valid split was not built"):
            only.split("valid")
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"{whole.fingerprint}-train"]


    def test_whole_cached_plan_serves_a_subset(self, infos, tmp_path):
        whole = _cached(_config(), infos, tmp_path)
        only = _cached(_config(), infos, tmp_path, ("valid",))
        assert only.cache_path == whole.cache_path
        assert [p.name for p in tmp_path.iterdir()] == [whole.fingerprint]



def _arrays_digest(plan) -> str:
    h = hashlib.sha256()
    for name in ("train", "valid", "test"):
        s = plan.split(name)
        h.update(np.ascontiguousarray(s.dataset_index).tobytes())
        for j in range(s.num_datasets):
            maps = s.constituent(j)
            for a in (maps.document_index, maps.sample_index, maps.shuffle_index):
                h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _build_in_child(args):
    cache_dir, lengths = args
    infos = {k: dataset_info(k, v) for k, v in lengths.items()}
    plan = _cached(_config(), infos, cache_dir)
    return plan.fingerprint, _arrays_digest(plan)


class TestCache:
    def test_roundtrip_is_memory_mapped(self, infos, tmp_path):
        built = _cached(_config(), infos, tmp_path)
        entry = tmp_path / built.fingerprint
        assert (entry / cache.MANIFEST).is_file()
        loaded = _cached(_config(), infos, tmp_path)
        assert isinstance(loaded.split("train").dataset_index, np.memmap)
        assert _arrays_digest(loaded) == _arrays_digest(index.build_data_maps(_config(), infos))
        assert [p.name for p in tmp_path.iterdir()] == [built.fingerprint]

    @pytest.mark.parametrize("damage", ["missing", "truncated", "manifest", "shape"])
    def test_corrupt_entry_is_rebuilt(self, infos, tmp_path, caplog, damage):
        config = _config()
        plan = _cached(config, infos, tmp_path)
        expected = _arrays_digest(plan)
        entry = tmp_path / plan.fingerprint
        target = entry / "train.dataset_index.npy"
        if damage == "missing":
            target.unlink()
        elif damage == "truncated":
            target.write_bytes(target.read_bytes()[:-7])
        elif damage == "manifest":
            (entry / cache.MANIFEST).write_text("{not json")
        else:
            np.save(target, np.zeros(3, dtype=np.int16))
        with caplog.at_level(logging.WARNING):
            rebuilt = _cached(config, infos, tmp_path)
        assert "corrupt" in caplog.text
        assert _arrays_digest(rebuilt) == expected
        assert sorted(p.name for p in tmp_path.iterdir()) == [plan.fingerprint]

    @pytest.mark.multiprocess
    def test_concurrent_builders(self, infos, tmp_path):
        lengths = {k: np.asarray(v.sequence_lengths) for k, v in infos.items()}
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(3) as pool:
            results = pool.map(_build_in_child, [(str(tmp_path), lengths)] * 3)
        assert len(set(results)) == 1
        assert sorted(os.listdir(tmp_path)) == [results[0][0]]
        plan = _cached(_config(), infos, tmp_path)
        assert _arrays_digest(plan) == results[0][1]


def test_checksummed_entry_with_foreign_meta_is_rebuilt(infos, tmp_path, caplog):
    spec = index.DataMapsSpec.resolve(_config(), infos)
    meta = {"splits": {"train": {"prefixes": [0]}}}  # not what build_arrays writes
    cache.save(str(tmp_path), spec.entry, {"lengths": np.zeros(3, np.int32)}, meta)
    with caplog.at_level(logging.WARNING):
        plan = _cached(_config(), infos, tmp_path)
    assert "unusable" in caplog.text
    assert _arrays_digest(plan) == _arrays_digest(index.build_data_maps(_config(), infos))
    # the rebuilt entry is sound
    assert cache.check_dir(cache.entry_path(str(tmp_path), spec.entry), spec.entry) is None


def test_no_location_builds_in_memory(infos):
    plan = load_or_build_data_maps(_config(), infos, DataAccess())
    assert plan.cache_path is None
    assert _arrays_digest(plan) == _arrays_digest(index.build_data_maps(_config(), infos))

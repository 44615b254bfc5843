"""`--data_cache_path` at a Megatron-Core cache: its GPTDataset maps are used when verified."""

from __future__ import annotations

import glob
import logging
import os
import shutil

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index, opening
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import load_or_build_data_maps

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def megatron_cache(tmp_path_factory):
    """Two datasets and the cache megatron-core writes for a 30/70 blend of them."""
    pytest.importorskip("megatron.core")
    pytest.importorskip("torch")
    import torch.distributed as dist
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    root = tmp_path_factory.mktemp("megatron_cache")
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=0, world_size=1)
    rng = np.random.default_rng(3)
    a = write_random_dataset(str(root / "a"), rng, 60, eod=0)
    b = write_random_dataset(str(root / "b"), rng, 90, eod=0)

    class Tok:
        eod = 0
        unique_identifiers = {"class": "Tok"}  # noqa: RUF012 - megatron reads a dict
        vocab_size = 1000

    cfg = GPTDatasetConfig(
        random_seed=5,
        sequence_length=16,
        blend=([a, b], [30.0, 70.0]),
        split="90,5,5",
        path_to_cache=str(root / "mcache"),
        tokenizer=Tok(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    BlendedMegatronDatasetBuilder(GPTDataset, [96, 16, 16], lambda: True, cfg).build()
    return a, b, str(root / "mcache")


def _config(a, b, cache, seed=5):
    """The configuration, and the map store at `cache` (None: in memory)."""
    config = index.GPTDataConfig(
        blend=["30", a, "70", b],
        split="90,5,5",
        seq_length=16,
        seed=seed,
        num_samples=(96, 16, 16),
    )
    return config, DataAccess(maps=MapStoreOptions(location=cache))


def _plan(config_and_access):
    config, access = config_and_access
    _, infos = opening.open_datasets(index.config_prefixes(config), access)
    return load_or_build_data_maps(config, infos, access)


def _maps(plan, split, j):
    m = plan.split(split).constituent(j)
    return m.document_index, m.sample_index, m.shuffle_index


def _copy(src, tmp_path):
    dst = str(tmp_path / "cache")
    shutil.copytree(src, dst)
    return dst


def test_megatron_maps_are_used_when_they_are_this_configuration(megatron_cache, tmp_path, caplog):
    a, b, mcache = megatron_cache
    cache = _copy(mcache, tmp_path)
    # Prove the files are read: swap two entries of a cached shuffle index (still a valid
    # permutation); the plan must then carry the swapped order.
    path = glob.glob(os.path.join(cache, "*-GPTDataset-train-shuffle_index.npy"))[0]
    shuffle = np.load(path)
    shuffle[[0, 1]] = shuffle[[1, 0]]
    np.save(path, shuffle)
    caplog.set_level(logging.INFO)
    plan = _plan(_config(a, b, cache))
    fresh = _plan(_config(a, b, None))
    used = [r.getMessage() for r in caplog.records if "using Megatron's cached" in r.getMessage()]
    assert len(used) == 6  # 2 datasets x 3 splits
    for split in ("train", "valid", "test"):
        for j in range(2):
            got, want = _maps(plan, split, j), _maps(fresh, split, j)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            if not np.array_equal(got[2], want[2]):
                assert split == "train" and np.array_equal(np.load(path), got[2])
    changed = [
        j
        for j in range(2)
        if not np.array_equal(_maps(plan, "train", j)[2], _maps(fresh, "train", j)[2])
    ]
    assert len(changed) == 1


def test_other_configuration_is_rebuilt_with_the_reason(megatron_cache, tmp_path, caplog):
    a, b, mcache = megatron_cache
    cache = _copy(mcache, tmp_path)
    caplog.set_level(logging.INFO)
    plan = _plan(_config(a, b, cache, seed=6))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("random_seed is 5, this configuration has 6" in w for w in warnings), warnings
    fresh = _plan(_config(a, b, None, seed=6))
    for j in range(2):
        for got, want in zip(_maps(plan, "train", j), _maps(fresh, "train", j)):
            np.testing.assert_array_equal(got, want)


def test_damaged_megatron_maps_are_rebuilt_with_the_reason(megatron_cache, tmp_path, caplog):
    a, b, mcache = megatron_cache
    cache = _copy(mcache, tmp_path)
    for path in glob.glob(os.path.join(cache, "*-GPTDataset-valid-document_index.npy")):
        np.save(path, np.load(path)[:-1])
    caplog.set_level(logging.INFO)
    plan = _plan(_config(a, b, cache))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("document_index has" in w for w in warnings) == 2, warnings
    fresh = _plan(_config(a, b, None))
    for j in range(2):
        for got, want in zip(_maps(plan, "valid", j), _maps(fresh, "valid", j)):
            np.testing.assert_array_equal(got, want)


def test_reading_megatron_cache_can_be_turned_off(megatron_cache, tmp_path, caplog):
    a, b, mcache = megatron_cache
    cache = _copy(mcache, tmp_path)
    config, access = _config(a, b, cache)
    caplog.set_level(logging.INFO)
    plan = _plan((config, access.with_maps(read_megatron_cache=False)))
    assert not [r for r in caplog.records if "Megatron" in r.getMessage()]
    fresh = _plan(_config(a, b, None))
    for got, want in zip(_maps(plan, "train", 0), _maps(fresh, "train", 0)):
        np.testing.assert_array_equal(got, want)

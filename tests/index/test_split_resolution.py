"""The one resolution of splits: `build_data_maps` and `estimate_plan` agree because both use it."""

from __future__ import annotations

import math

import pytest
from helpers_data import random_infos

from jaxblend import index
from jaxblend.index import split_resolution
from jaxblend.index.estimate import estimate_plan


@pytest.fixture(scope="module")
def infos():
    return random_infos(11, {"/d/a": (50, 300), "/d/b": (80, 120), "/d/c": (10, 90)})


CONFIGS = {
    "single": {"blend": ["/d/a"], "num_samples": (120, None, None)},
    "weighted": {"blend": ["30", "/d/a", "60", "/d/b", "10", "/d/c"], "num_samples": (200, 30, 9)},
    "unweighted": {"blend": ["/d/a", "/d/b"], "num_samples": (None, 7, None)},
    "valid_partial": {
        "blend": ["/d/a", "/d/c"],
        "drop_last_partial_validation_sequence": False,
    },
    "per_split": {
        "blend": None,
        "split": None,
        "blend_per_split": (["2", "/d/a", "1", "/d/b"], ["/d/c"], None),
        "num_samples": (90, None, None),
    },
}


def _config(**overrides) -> index.GPTDataConfig:
    base = {"split": "80,15,5", "seq_length": 16}
    base.update(overrides)
    return index.GPTDataConfig(**base)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_estimate_counts_the_samples_the_plan_builds(infos, name):
    config = _config(**CONFIGS[name])
    plan = index.build_data_maps(config, infos)
    estimate = estimate_plan(config, infos)
    assert estimate.fingerprint == plan.fingerprint
    for split in ("train", "valid", "test"):
        built = plan.split(split)
        rows = [e for e in estimate.datasets if e.split == split]
        if built is None:
            assert rows == []
            continue
        per_dataset = [built.dataset_length(j) for j in range(built.num_datasets)]
        assert [e.samples for e in rows] == per_dataset
        assert [e.prefix for e in rows] == list(built.dataset_names)
        if built.is_blended:
            assert estimate.blend_sizes[split] == len(built)


def test_weighted_requests_carry_the_surplus():
    config = _config(blend=["1", "/d/a", "3", "/d/b"], num_samples=(101, 10, 10))
    train = split_resolution.resolve_splits(config)[0]
    assert train.kind == "weighted" and train.weights == (0.25, 0.75)
    assert train.blend_targets() == [math.ceil(101 * 0.25), math.ceil(101 * 0.75)]
    assert train.dataset_requests() == [math.ceil(26 * 1.005), math.ceil(76 * 1.005)]


def test_kinds_bookends_and_partial_samples():
    config = _config(blend=["/d/a"], split="90,10,0", drop_last_partial_validation_sequence=False)
    train, valid, test = split_resolution.resolve_splits(config)
    assert test is None
    assert (train.kind, train.dataset_requests(), train.blend_targets()) == ("single", [None], None)
    assert train.drop_last_partial and not valid.drop_last_partial
    assert valid.bookend[1] == pytest.approx(1.0)
    only_valid = split_resolution.resolve_splits(config, ("valid",))
    assert only_valid[0] is None and only_valid[1] == valid


def test_per_split_single_prefix_ignores_its_weight():
    config = _config(blend=None, split=None, blend_per_split=(["5", "/d/a"], None, None))
    (train, valid, test) = split_resolution.resolve_splits(config)
    assert train.kind == "single" and train.bookend == (0.0, 1.0)
    assert valid is None and test is None


def test_weighted_blend_without_a_sample_count_names_the_flag():
    config = _config(blend=["1", "/d/a", "1", "/d/b"])
    with pytest.raises(ValueError, match="--train_samples"):
        split_resolution.resolve_splits(config)


def test_dataset_info_from_a_mapping_or_a_callable(infos):
    assert split_resolution.dataset_info(infos, "/d/a") is infos["/d/a"]
    assert split_resolution.dataset_info(infos.__getitem__, "/d/b") is infos["/d/b"]
    with pytest.raises(ValueError, match="/d/missing"):
        split_resolution.dataset_info(infos, "/d/missing")
    with pytest.raises(TypeError, match="expected a DatasetInfo"):
        split_resolution.dataset_info({"/d/x": 3}, "/d/x")

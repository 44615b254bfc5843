"""Bit-exact parity of jaxblend's index maps with megatron-core's BlendedMegatronDatasetBuilder."""

from __future__ import annotations

import numpy as np
import pytest

megatron = pytest.importorskip("megatron.core")

import index_parity_helpers as H

from jaxblend import index
from jaxblend.index import gpt

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    rng = np.random.default_rng(7)
    p = {}
    p["a"] = H.write_dataset(str(root / "a"), H.random_documents(rng, 300))
    p["b"] = H.write_dataset(str(root / "b"), H.random_documents(rng, 120, max_length=90))
    p["c"] = H.write_dataset(str(root / "c"), H.random_documents(rng, 50, max_length=20))
    p["multi"] = H.write_dataset(
        str(root / "multi"), H.random_documents(rng, 80, sequences_per_document=4)
    )
    p["i32"] = H.write_dataset(
        str(root / "i32"), H.random_documents(rng, 150, vocab=200_000), dtype=np.int32
    )
    parts = [H.write_dataset(str(root / f"part{k}"), H.random_documents(rng, 70)) for k in range(3)]
    p["merged"] = H.merge_datasets(str(root / "merged"), parts)
    readers = {prefix: H.open_megatron(prefix) for prefix in p.values()}
    infos = {prefix: H.info_of(prefix) for prefix in p.values()}
    return p, readers, infos


def _resolve(p, blend):
    if blend is None:
        return None
    return [p.get(x, x) for x in blend]


def _check(
    data,
    *,
    blend=None,
    blend_per_split=None,
    split=None,
    seq_length,
    seed=1234,
    num_samples=(None, None, None),
    extra=True,
    drop_last_valid=True,
    surplus=0.005,
):
    p, readers, infos = data
    blend = _resolve(p, blend)
    per_split = None if blend_per_split is None else [_resolve(p, b) for b in blend_per_split]
    theirs = H.megatron_build(
        blend=blend,
        blend_per_split=per_split,
        split=split,
        seq_length=seq_length,
        seed=seed,
        num_samples=num_samples,
        extra=extra,
        drop_last_valid=drop_last_valid,
        surplus=surplus,
    )
    config = index.GPTDataConfig(
        blend=blend,
        blend_per_split=None if per_split is None else tuple(per_split),
        split=split,
        seq_length=seq_length,
        seed=seed,
        num_samples=tuple(num_samples),
        add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=drop_last_valid,
        mid_level_dataset_surplus=surplus,
    )
    plan = index.build_data_maps(config, infos)
    for name, dataset in zip(("train", "valid", "test"), theirs):
        H.assert_split_parity(plan.split(name), dataset, readers)
    return plan, theirs


@pytest.mark.parametrize("seq_length", [7, 128, 1024])
@pytest.mark.parametrize("extra", [True, False])
def test_single_prefix_one_epoch(data, seq_length, extra):
    _check(data, blend=["a"], split="969,30,1", seq_length=seq_length, extra=extra)


@pytest.mark.parametrize("seed", [1, 42, 2**31 + 5])
def test_single_prefix_counts_and_seeds(data, seed):
    _check(data, blend=["a"], split="90,7,3", seq_length=16, seed=seed, num_samples=(700, 40, 9))


@pytest.mark.parametrize("extra", [True, False])
def test_keep_last_partial_validation_sequence(data, extra):
    for counts in [(None, None, None), (50, 23, 4)]:
        plan, theirs = _check(
            data,
            blend=["b"],
            split="80,20",
            seq_length=13,
            extra=extra,
            num_samples=counts,
            drop_last_valid=False,
        )
        assert plan.split("test") is None and theirs[2] is None


@pytest.mark.parametrize("separate", [True, False])
def test_multi_epoch_final_epoch(data, separate):
    p, _, infos = data
    info = infos[p["c"]]
    seq_length = 5
    documents = index.split.split_indices((0.0, 1.0), info.num_sequences)
    tokens = int(info.sequence_lengths[documents].sum())
    per_epoch = (tokens - 1) // seq_length
    count = 2 * per_epoch + (per_epoch // 10 if separate else per_epoch - 2)
    num_epochs = gpt.num_epochs_for(tokens, count, seq_length, True)
    flag, _ = gpt.separate_final_epoch_for(num_epochs, tokens, count, seq_length, True)
    assert num_epochs == 3 and flag == separate
    _check(
        data,
        blend_per_split=[["c"], None, None],
        seq_length=seq_length,
        num_samples=(count, None, None),
    )


def test_int32_tokens(data):
    # The test split of 150 sequences is empty: None gives an empty split, as in Megatron.
    _check(data, blend=["i32"], split="969,30,1", seq_length=32, num_samples=(100, 3, None))


def test_multi_sequence_documents(data):
    _check(data, blend=["multi"], split="8,1,1", seq_length=9, num_samples=(300, 20, None))


def test_merged_dataset(data):
    _check(data, blend=["merged", "a"], split="90,8,2", seq_length=11)


@pytest.mark.parametrize("weights", [("0.3", "0.7", "0.2"), ("30", "70", "5")])
def test_weighted_blend(data, weights):
    blend = [weights[0], "a", weights[1], "b", weights[2], "c"]
    _check(data, blend=blend, split="90,8,2", seq_length=10, num_samples=(5000, 41, 3))


def test_weighted_blend_size_overshoot(data):
    plan, theirs = _check(
        data,
        blend=["0.6", "a", "0.3", "b", "0.1", "multi"],
        split="1",
        seq_length=3,
        num_samples=(5000, 0, 0),
    )
    assert len(plan.split("train")) == len(theirs[0]) == 5003


def test_blend_per_split(data):
    _check(
        data,
        blend_per_split=[["1", "a", "2", "b"], ["c"], ["a", "merged"]],
        seq_length=8,
        num_samples=(400, 30, None),
    )


def test_blend_per_split_sized_unweighted(data):
    _check(
        data,
        blend_per_split=[["a", "b", "c"], ["2", "c", "1", "i32"], None],
        seq_length=6,
        num_samples=(200, 50, None),
        extra=False,
    )


def test_unweighted_sized_blend(data):
    _check(data, blend=["a", "b", "c"], split="80,12,8", seq_length=12, num_samples=(150, 10, 3))


def test_exhaustive_blend(data):
    _check(data, blend=["a", "b", "c", "multi"], split="70,20,10", seq_length=12)


def test_weights_that_normalize_are_accepted_as_by_megatron(data):
    # The one weight rule is Megatron's: all-negative weights normalize as their absolute values,
    # and Megatron's builder accepts them; the maps are those of the positive weights.
    _check(
        data,
        blend=["-0.6", "a", "-0.3", "b", "-0.1", "c"],
        split="90,8,2",
        seq_length=10,
        num_samples=(3000, 41, 3),
    )
    _check(data, blend=["-2", "b"], split="90,8,2", seq_length=10, num_samples=(90, 5, 1))
    _check(
        data,
        blend_per_split=[["-1", "a", "-2", "b"], ["c"], None],
        seq_length=8,
        num_samples=(400, 30, None),
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # Megatron's normalize of such weights
@pytest.mark.parametrize(
    ("weights", "says"),
    [
        (("0", "1"), "is zero"),
        (("-1", "2"), "is negative"),
        (("nan", "1"), "not a finite number"),
        (("inf", "1"), "not a finite number"),
        (("0", "0"), "all zero"),
        (("1e308", "1e308"), "do not normalize"),
    ],
)
def test_weights_that_do_not_normalize_are_refused_as_by_megatron(data, weights, says):
    p, _, _ = data
    blend = [weights[0], p["a"], weights[1], p["b"]]
    settings = {"split": "90,8,2", "seq_length": 10, "num_samples": (300, 5, 1)}
    with pytest.raises((AssertionError, ValueError)):  # BlendedDataset's `weights > 0` and co.
        H.megatron_build(blend=blend, seed=1234, **settings)
    with pytest.raises(ValueError, match=says):
        index.GPTDataConfig(blend=blend, **settings)


def test_single_prefix_with_weight_is_a_blend(data):
    plan, _ = _check(data, blend=["1", "b"], split="90,8,2", seq_length=10, num_samples=(90, 5, 1))
    assert plan.split("train").is_blended


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    # 1,030 small datasets: unweighted blends of 1,024+ datasets take the tournament tree.
    root = tmp_path_factory.mktemp("wide")
    rng = np.random.default_rng(8)
    p = {}
    for k in range(1030):
        docs = H.random_documents(rng, int(rng.integers(5, 12)), max_length=40)
        p[f"w{k}"] = H.write_dataset(str(root / f"w{k}"), docs)
    readers = {prefix: H.open_megatron(prefix) for prefix in p.values()}
    infos = {prefix: H.info_of(prefix) for prefix in p.values()}
    # Megatron requires every blended dataset to have samples (weights > 0): >= 5 tokens each.
    assert min(int(i.sequence_lengths.sum()) for i in infos.values()) >= 5
    return p, readers, infos


def test_unweighted_blend_of_1030_datasets(wide):
    names = [f"w{k}" for k in range(1030)]
    plan, _ = _check(
        wide, blend_per_split=[names, None, None], seq_length=4, num_samples=(None, None, None)
    )
    assert plan.split("train").num_datasets == 1030


def test_weighted_blend_of_1030_datasets(wide):
    rng = np.random.default_rng(9)
    blend = []
    for k, w in enumerate(1.0 + rng.random(1030)):
        blend += [repr(float(w)), f"w{k}"]
    _check(wide, blend_per_split=[blend, None, None], seq_length=4, num_samples=(5000, None, None))

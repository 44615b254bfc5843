"""Staged blends against Megatron-Core 0.16.1: epoch 0 of every dataset is Megatron's one-epoch
GPTDataset, each stage's choices are Megatron's blending helper over the stage, and a one-stage
schedule within one epoch is Megatron's weighted BlendedDataset, tokens included."""

from __future__ import annotations

import numpy as np
import pytest

megatron = pytest.importorskip("megatron.core")

import index_parity_helpers as H

from jaxblend import index

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity_staged")
    rng = np.random.default_rng(22)
    p = {}
    p["a"] = H.write_dataset(str(root / "a"), H.random_documents(rng, 300))
    p["b"] = H.write_dataset(str(root / "b"), H.random_documents(rng, 200, max_length=90))
    p["c"] = H.write_dataset(str(root / "c"), H.random_documents(rng, 40, max_length=20))
    readers = {prefix: H.open_megatron(prefix) for prefix in p.values()}
    infos = {prefix: H.info_of(prefix) for prefix in p.values()}
    return p, readers, infos


def _schedule(p, *stages):
    return index.BlendSchedule(
        tuple(index.BlendStage(s, [p.get(x, x) for x in b]) for s, b in stages)
    )


@pytest.mark.parametrize(("split", "seed"), [("90,8,2", 1234), ("100,0,0", 5)])
def test_epoch_zero_is_megatrons_one_epoch_dataset(data, split, seed):
    p, readers, infos = data
    schedule = _schedule(
        p, (0, ("50", "a", "50", "b")), (300, ("10", "a", "90", "c")), (500, ("b",))
    )
    config = index.GPTDataConfig(
        blend=[p["a"]], split=split, seq_length=10, seed=seed,
        num_samples=(900, None, None), train_schedule=schedule,
    )
    train = index.build_data_maps(config, infos).split("train")
    assert train.dataset_epochs(2) > 1  # /c wraps: epoch 0 still Megatron's
    for j, prefix in enumerate(train.dataset_names):
        (theirs, _, _) = H.megatron_build(
            blend=[prefix], split=split, seq_length=10, seed=seed, num_samples=(None, None, None)
        )
        ours = train.constituent(j, epoch=0)
        H.assert_same_array(ours.document_index, theirs.document_index, f"ds{j} document_index")
        H.assert_same_array(ours.sample_index, theirs.sample_index, f"ds{j} sample_index")
        H.assert_same_array(ours.shuffle_index, theirs.shuffle_index, f"ds{j} shuffle_index")
        # The first epoch's samples read Megatron's tokens.
        di = np.asarray(train.dataset_index)
        dsi = np.asarray(train.dataset_sample_index)
        for i in np.flatnonzero((di == j) & (dsi < len(theirs)))[:10]:
            np.testing.assert_array_equal(
                H.window_of(train, readers, int(i)), H.megatron_window(theirs, int(dsi[i]))
            )


def test_stages_follow_megatrons_blending_helper(data):
    from megatron.core.datasets import helpers_cpp

    p, _, infos = data
    schedule = _schedule(
        p, (0, ("30", "a", "70", "b")), (250, ("1", "b", "1", "c", "2", "a")), (700, ("c",))
    )
    config = index.GPTDataConfig(
        blend_per_split=(None, [p["a"]], None), seq_length=8, num_samples=(1000, None, None),
        train_schedule=schedule,
    )
    train = index.build_data_maps(config, infos).split("train")
    position = {name: j for j, name in enumerate(train.dataset_names)}
    counts = np.zeros(train.num_datasets, dtype=np.int64)
    for stage, (start, stop) in zip(schedule.stages, schedule.bounds(1000)):
        weights = np.array(stage.weights(), dtype=np.float64)
        size = stop - start
        di = np.zeros(size, dtype=np.int16)
        dsi = np.zeros(size, dtype=np.int64)
        helpers_cpp.build_blending_indices(di, dsi, weights, len(weights), size, False)
        ids = np.array([position[x] for x in stage.parsed.prefixes])[di]
        np.testing.assert_array_equal(train.dataset_index[start:stop], ids)
        np.testing.assert_array_equal(train.dataset_sample_index[start:stop], counts[ids] + dsi)
        counts += np.bincount(ids, minlength=train.num_datasets)


def test_one_stage_is_megatrons_weighted_blend(data):
    p, readers, infos = data
    blend = ["30", p["a"], "70", p["b"]]
    n = 400
    (theirs, _, _) = H.megatron_build(
        blend=blend, split="1", seq_length=12, seed=1234, num_samples=(n, 0, 0)
    )
    config = index.GPTDataConfig(
        blend=None, split=None, seq_length=12, num_samples=(n, None, None),
        train_schedule=index.BlendSchedule.single(blend),
    )
    train = index.build_data_maps(config, infos).split("train")
    for j, constituent in enumerate(theirs.datasets):  # within one epoch
        assert len(constituent.document_index) == infos[train.dataset_names[j]].num_sequences
    H.assert_same_array(train.dataset_index, theirs.dataset_index[:n], "dataset_index")
    H.assert_same_array(train.dataset_sample_index, theirs.dataset_sample_index[:n], "dataset_sample_index")
    for i in range(0, n, 7):
        np.testing.assert_array_equal(H.window_of(train, readers, i), H.megatron_window(theirs, i))

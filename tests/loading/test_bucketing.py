"""Token-budget bucketing: plan invariants vs a sequential reference, persistence, loader, resume."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxblend import IndexedDataset, IndexedDatasetBuilder
from jaxblend.loading import (
    BucketConfig,
    BucketPlan,
    make_bucketed_loader,
    make_loader,
    plan_buckets,
)
from jaxblend.sources import SequenceSource


def reference_plan(lengths, config):
    """The seed's sequential algorithm, one sample at a time (slow twin of plan_buckets)."""
    rows = config.bucket_rows()
    buckets = [[] for _ in range(config.num_buckets)]
    steps = []
    for epoch in range(config.num_epochs):
        order = (
            np.arange(len(lengths))
            if config.seed is None
            else np.random.default_rng([config.seed, epoch]).permutation(len(lengths))
        )
        for i in order.tolist():
            n = int(lengths[i])
            if n > config.max_length:
                if config.over_length == "skip":
                    continue
                n = config.max_length
            if n == 0:
                continue
            b = (n - 1) // config.bucket_width
            buckets[b].append(i)
            if len(buckets[b]) == rows[b]:
                steps.append((b, buckets[b]))
                buckets[b] = []
    if config.leftover == "pad":
        for b, rest in enumerate(buckets):
            if rest:
                steps.append((b, rest + [-1] * (int(rows[b]) - len(rest))))
    return steps


def lognormal_lengths(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(3.5, 0.9, n), 0, 400).astype(np.int64)


CONFIGS = {
    "ordered": BucketConfig(bucket_width=16, max_length=128, token_budget=1024),
    "shuffled_rows8_pad": BucketConfig(
        bucket_width=16, max_length=128, token_budget=1024, row_multiple=8, leftover="pad", seed=5
    ),
    "truncate_2_epochs": BucketConfig(
        bucket_width=24,
        max_length=100,
        token_budget=800,
        over_length="truncate",
        row_multiple=2,
        seed=1,
        num_epochs=2,
    ),
}


class TestPlan:
    @pytest.mark.parametrize("name", sorted(CONFIGS))
    def test_equals_sequential_reference(self, name):
        config = CONFIGS[name]
        lengths = lognormal_lengths(3000)
        lengths[::97] = 0
        plan = plan_buckets(lengths, config)
        expected = reference_plan(lengths, config)
        assert len(plan) == len(expected)
        for k, (bucket, ids) in enumerate(expected):
            got_bucket, got_ids = plan.batch(k)
            assert got_bucket == bucket
            np.testing.assert_array_equal(got_ids, ids)

    @pytest.mark.parametrize("name", sorted(CONFIGS))
    def test_budget_shapes_and_membership(self, name):
        config = CONFIGS[name]
        lengths = lognormal_lengths(3000, seed=2)
        plan = plan_buckets(lengths, config)
        fixed = {(int(r), int(u)) for r, u in zip(config.bucket_rows(), config.bucket_lengths())}
        assert plan.shapes() <= fixed and len(fixed) == config.num_buckets
        for k in range(len(plan)):
            bucket, ids = plan.batch(k)
            rows, length = plan.shape(k)
            assert ids.size == rows and rows % config.row_multiple == 0 and rows > 0
            assert rows * length <= config.token_budget
            assert (rows + config.row_multiple) * length > config.token_budget  # no room for more
            real = np.minimum(lengths[ids[ids >= 0]], config.max_length)
            assert (real <= length).all() and (real > bucket * config.bucket_width).all()
        ids = plan.sample_ids[plan.sample_ids >= 0]
        per_epoch = np.bincount(ids, minlength=lengths.size)
        assert per_epoch.max() <= config.num_epochs
        keepable = (lengths > 0) & (
            (lengths <= config.max_length) | (config.over_length == "truncate")
        )
        assert not per_epoch[~keepable].any()
        if config.leftover == "pad":
            np.testing.assert_array_equal(per_epoch[keepable], config.num_epochs)
        else:  # what is left in the buckets is less than one batch per bucket
            assert keepable.sum() * config.num_epochs - ids.size < config.bucket_rows().sum()

    def test_deterministic_and_fingerprinted(self):
        lengths = lognormal_lengths(1000)
        config = CONFIGS["shuffled_rows8_pad"]
        a, b = plan_buckets(lengths, config), plan_buckets(lengths.copy(), config)
        assert a.fingerprint == b.fingerprint
        np.testing.assert_array_equal(a.sample_ids, b.sample_ids)
        other = BucketConfig(
            bucket_width=16,
            max_length=128,
            token_budget=1024,
            row_multiple=8,
            leftover="pad",
            seed=6,
        )
        assert plan_buckets(lengths, other).fingerprint != a.fingerprint
        lengths[0] += 1
        assert plan_buckets(lengths, config).fingerprint != a.fingerprint

    def test_save_load_roundtrip_and_validation(self, tmp_path):
        plan = plan_buckets(lognormal_lengths(1000), CONFIGS["ordered"])
        plan.save(tmp_path / "plan")
        plan.save(tmp_path / "plan")  # overwrite in place
        loaded = BucketPlan.load(tmp_path / "plan")
        assert loaded.fingerprint == plan.fingerprint and isinstance(loaded.sample_ids, np.memmap)
        for name in ("step_bucket", "step_offsets", "sample_ids"):
            np.testing.assert_array_equal(getattr(loaded, name), getattr(plan, name))
        np.save(tmp_path / "plan" / "bucket_rows.npy", plan.bucket_rows + 1)
        with pytest.raises(ValueError, match="bucket_rows"):
            BucketPlan.load(tmp_path / "plan")
        with pytest.raises(ValueError, match="cannot read"):
            BucketPlan.load(tmp_path / "missing")

    @pytest.mark.parametrize(
        "kw, match",
        [
            ({"bucket_width": 0}, "bucket_width"),
            ({"over_length": "cut"}, "over_length"),
            ({"leftover": "keep"}, "leftover"),
            ({"token_budget": 100}, "token_budget"),
            ({"row_multiple": 16}, "token_budget"),
            ({"seed": -1}, "seed"),
        ],
    )
    def test_bad_config(self, kw, match):
        with pytest.raises(ValueError, match=match):
            BucketConfig(**{"bucket_width": 16, "max_length": 128, "token_budget": 1024, **kw})

    def test_negative_length_refused(self):
        with pytest.raises(ValueError, match="lengths"):
            plan_buckets(np.array([3, -1]), CONFIGS["ordered"])


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("bucketing") / "seqs")
    lengths = lognormal_lengths(700, seed=4)
    rng = np.random.default_rng(9)
    with IndexedDatasetBuilder(prefix, np.uint16) as builder:
        for n in lengths.tolist():
            builder.add_sequence(rng.integers(1, 3000, n).astype(np.uint16))
            builder.end_document()
    return prefix


def mesh8(shape=(8,), axes=("data",)):
    return Mesh(np.array(jax.devices()[:8]).reshape(shape), axes)


def host(batch):
    return {k: np.asarray(v) for k, v in batch.items()}


class TestSequenceSource:
    def test_padded_rows(self, sequences):
        source = SequenceSource(sequences, max_length=64, pad_id=7)
        ds = IndexedDataset(sequences)
        ids = np.array([5, -1, 0, 699])
        b = source.get_padded_batch(ids, 32)
        assert b["tokens"].shape == (4, 32)
        for r, i in enumerate(ids.tolist()):
            n = 0 if i < 0 else min(int(ds.sequence_lengths[i]), 32)
            assert b["lengths"][r] == n and b["padding_mask"][r].sum() == n
            if i >= 0:
                np.testing.assert_array_equal(b["tokens"][r, :n], ds.get(i)[:n])
            assert (b["tokens"][r, n:] == 7).all()
        np.testing.assert_array_equal(b["sample_ids"], ids)
        with pytest.raises(IndexError):
            source.get_padded_batch(np.array([700]), 8)

    def test_fixed_shape_through_make_loader(self, sequences):
        source = SequenceSource(sequences, max_length=48)
        batch = host(next(make_loader(source, mesh8(), global_batch_size=16)))
        expected = source.get_batch(np.arange(16))
        for key in expected:
            np.testing.assert_array_equal(batch[key], expected[key])


class TestBucketedLoader:
    config = BucketConfig(
        bucket_width=32, max_length=192, token_budget=1536, row_multiple=8, seed=3, leftover="pad"
    )

    def test_batches_follow_the_plan_on_any_mesh(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_buckets(source.lengths, self.config)
        a = [host(b) for b in make_bucketed_loader(source, plan, mesh8())]
        b = [host(b) for b in make_bucketed_loader(source, plan, mesh8((4, 2), ("data", "tensor")))]
        assert len(a) == len(plan) == len(b)
        shapes = set()
        for k, (x, y) in enumerate(zip(a, b)):
            bucket, ids = plan.batch(k)
            expected = source.get_padded_batch(ids, int(plan.bucket_lengths[bucket]))
            for key in expected:
                np.testing.assert_array_equal(x[key], expected[key], err_msg=key)
                assert x[key].tobytes() == y[key].tobytes()
            shapes.add(x["tokens"].shape)
        assert shapes == plan.shapes() and len(shapes) <= self.config.num_buckets

    def test_resume_from_state_and_fingerprint_check(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_buckets(source.lengths, self.config)
        full = [host(b) for b in make_bucketed_loader(source, plan, mesh8())]
        loader = make_bucketed_loader(source, plan, mesh8())
        for _ in range(3):
            next(loader)
        state = json.loads(json.dumps(loader.state()))
        assert state["step"] == 3
        rest = [
            host(b)
            for b in make_bucketed_loader(
                source,
                plan,
                mesh8((2, 4), ("data", "fsdp")),
                batch_axes=("data", "fsdp"),
                state=state,
            )
        ]
        assert len(rest) == len(full) - 3
        for x, y in zip(full[3:], rest):
            for key in x:
                assert x[key].tobytes() == y[key].tobytes()
        other = plan_buckets(
            source.lengths,
            BucketConfig(
                bucket_width=32, max_length=192, token_budget=1536, row_multiple=8, seed=4
            ),
        )
        with pytest.raises(ValueError, match="different source or plan"):
            make_bucketed_loader(source, other, mesh8(), state=state)

    def test_rows_not_divisible_by_the_mesh_are_refused(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_buckets(
            source.lengths, BucketConfig(bucket_width=32, max_length=192, token_budget=1500)
        )
        with pytest.raises(ValueError, match="row_multiple"):
            make_bucketed_loader(source, plan, mesh8())

    def test_grain_worker_process(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_buckets(source.lengths, self.config)
        loader = make_bucketed_loader(
            source, plan, mesh8(), worker_count=1, start_step=len(plan) - 2
        )
        got = [host(b) for b in loader]
        assert len(got) == 2
        bucket, ids = plan.batch(len(plan) - 1)
        np.testing.assert_array_equal(
            got[-1]["tokens"],
            source.get_padded_batch(ids, int(plan.bucket_lengths[bucket]))["tokens"],
        )

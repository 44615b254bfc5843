"""Token-budget bucket plans: invariants vs a sequential reference, the StepPlan view, persistence."""

from __future__ import annotations

import numpy as np
import pytest

from jaxblend.sampling import (
    BatchShape,
    TokenBudgetConfig,
    load_token_budget_plan,
    plan_token_budget,
    save_token_budget_plan,
)


def reference_plan(lengths, config):
    """The seed's sequential algorithm, one sample at a time (slow twin of plan_token_budget)."""
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
    "ordered": TokenBudgetConfig(bucket_width=16, max_length=128, token_budget=1024),
    "shuffled_rows8_pad": TokenBudgetConfig(
        bucket_width=16, max_length=128, token_budget=1024, row_multiple=8, leftover="pad", seed=5
    ),
    "truncate_2_epochs": TokenBudgetConfig(
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
        plan = plan_token_budget(lengths, config)
        expected = reference_plan(lengths, config)
        assert len(plan) == len(expected)
        for k, (bucket, ids) in enumerate(expected):
            assert plan.bucket(k) == bucket
            np.testing.assert_array_equal(plan.sample_ids(k), ids)

    @pytest.mark.parametrize("name", sorted(CONFIGS))
    def test_budget_shapes_and_membership(self, name):
        config = CONFIGS[name]
        lengths = lognormal_lengths(3000, seed=2)
        plan = plan_token_budget(lengths, config)
        fixed = {(int(r), int(u)) for r, u in zip(config.bucket_rows(), config.bucket_lengths())}
        assert plan.batch_shapes() <= fixed and len(fixed) == config.num_buckets
        for k in range(len(plan)):
            bucket, ids = plan.bucket(k), plan.sample_ids(k)
            rows, length = plan.batch_size(k), plan.padded_length(k)
            assert ids.size == rows and rows % config.row_multiple == 0 and rows > 0
            assert rows * length <= config.token_budget
            assert (rows + config.row_multiple) * length > config.token_budget  # no room for more
            real = np.minimum(lengths[ids[ids >= 0]], config.max_length)
            assert (real <= length).all() and (real > bucket * config.bucket_width).all()
        ids = plan.row_ids[plan.row_ids >= 0]
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
        a, b = plan_token_budget(lengths, config), plan_token_budget(lengths.copy(), config)
        assert a.fingerprint == b.fingerprint
        np.testing.assert_array_equal(a.row_ids, b.row_ids)
        other = TokenBudgetConfig(
            bucket_width=16,
            max_length=128,
            token_budget=1024,
            row_multiple=8,
            leftover="pad",
            seed=6,
        )
        assert plan_token_budget(lengths, other).fingerprint != a.fingerprint
        lengths[0] += 1
        assert plan_token_budget(lengths, config).fingerprint != a.fingerprint

    def test_save_load_roundtrip_and_validation(self, tmp_path):
        plan = plan_token_budget(lognormal_lengths(1000), CONFIGS["ordered"])
        save_token_budget_plan(plan, tmp_path / "plan")
        save_token_budget_plan(plan, tmp_path / "plan")  # overwrite in place
        loaded = load_token_budget_plan(tmp_path / "plan")
        assert loaded.fingerprint == plan.fingerprint and isinstance(loaded.row_ids, np.memmap)
        assert sorted(p.name for p in (tmp_path / "plan").iterdir()) == [
            "bucket_lengths.npy", "bucket_rows.npy", "plan.json", "sample_ids.npy",
            "step_bucket.npy", "step_offsets.npy",
        ]
        for name in ("step_bucket", "step_offsets", "row_ids"):
            np.testing.assert_array_equal(getattr(loaded, name), getattr(plan, name))
        np.save(tmp_path / "plan" / "bucket_rows.npy", plan.bucket_rows + 1)
        with pytest.raises(ValueError, match="bucket_rows"):
            load_token_budget_plan(tmp_path / "plan")
        with pytest.raises(ValueError, match="cannot read"):
            load_token_budget_plan(tmp_path / "missing")

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
            TokenBudgetConfig(**{"bucket_width": 16, "max_length": 128, "token_budget": 1024, **kw})

    def test_negative_length_refused(self):
        with pytest.raises(ValueError, match="lengths"):
            plan_token_budget(np.array([3, -1]), CONFIGS["ordered"])

    def test_step_plan_view(self):
        config = CONFIGS["shuffled_rows8_pad"]
        lengths = lognormal_lengths(2000, seed=3)
        plan = plan_token_budget(lengths, config)
        assert plan.num_steps == len(plan) and plan.num_samples == int(plan.row_ids.max()) + 1
        shapes = {BatchShape(plan.batch_size(k), plan.padded_length(k)) for k in range(len(plan))}
        assert shapes == set(plan.batch_shapes())
        assert plan.sample_ids(len(plan) - 1).dtype == np.int64
        assert (plan.row_ids == -1).any()  # the padded leftovers
        with pytest.raises(IndexError, match="out of range"):
            plan.sample_ids(len(plan))

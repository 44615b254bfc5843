"""Token-budget batches through make_loader: SequenceSource, layouts, resume, workers."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxblend import IndexedDataset, IndexedDatasetBuilder
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.sampling import TokenBudgetConfig, plan_token_budget
from jaxblend.sources import SequenceSource


def lognormal_lengths(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(3.5, 0.9, n), 0, 400).astype(np.int64)


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
    config = TokenBudgetConfig(
        bucket_width=32, max_length=192, token_budget=1536, row_multiple=8, seed=3, leftover="pad"
    )

    def test_batches_follow_the_plan_on_any_mesh(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_token_budget(source.lengths, self.config)
        a = [host(b) for b in make_loader(source, mesh8(), plan=plan)]
        b = [host(b) for b in make_loader(source, mesh8((4, 2), ("data", "tensor")), plan=plan)]
        assert len(a) == len(plan) == len(b)
        shapes = set()
        for k, (x, y) in enumerate(zip(a, b)):
            expected = source.get_padded_batch(plan.sample_ids(k), plan.padded_length(k))
            for key in expected:
                np.testing.assert_array_equal(x[key], expected[key], err_msg=key)
                assert x[key].tobytes() == y[key].tobytes()
            shapes.add(x["tokens"].shape)
        assert shapes == set(plan.batch_shapes()) and len(shapes) <= self.config.num_buckets

    def test_resume_from_state_and_fingerprint_check(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_token_budget(source.lengths, self.config)
        full = [host(b) for b in make_loader(source, mesh8(), plan=plan)]
        loader = make_loader(source, mesh8(), plan=plan)
        for _ in range(3):
            next(loader)
        state = json.loads(json.dumps(loader.state()))
        assert state["step"] == 3
        rest = [
            host(b)
            for b in make_loader(
                source,
                mesh8((2, 4), ("data", "fsdp")),
                plan=plan,
                batch_axes=("data", "fsdp"),
                state=state,
            )
        ]
        assert len(rest) == len(full) - 3
        for x, y in zip(full[3:], rest):
            for key in x:
                assert x[key].tobytes() == y[key].tobytes()
        other = plan_token_budget(
            source.lengths,
            TokenBudgetConfig(
                bucket_width=32, max_length=192, token_budget=1536, row_multiple=8, seed=4
            ),
        )
        with pytest.raises(ValueError, match="different source or plan"):
            make_loader(source, mesh8(), plan=other, state=state)

    def test_rows_not_divisible_by_the_mesh_are_refused(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_token_budget(
            source.lengths, TokenBudgetConfig(bucket_width=32, max_length=192, token_budget=1500)
        )
        with pytest.raises(ValueError, match="row_multiple"):
            make_loader(source, mesh8(), plan=plan)

    def test_grain_worker_process(self, sequences):
        source = SequenceSource(sequences, max_length=192)
        plan = plan_token_budget(source.lengths, self.config)
        loader = make_loader(source, mesh8(), plan=plan, prefetch=PrefetchOptions(worker_count=1), start_step=len(plan) - 2)
        got = [host(b) for b in loader]
        assert len(got) == 2
        last = len(plan) - 1
        np.testing.assert_array_equal(
            got[-1]["tokens"],
            source.get_padded_batch(plan.sample_ids(last), plan.padded_length(last))["tokens"],
        )


def test_bucketed_plan_needs_a_padded_source(sequences):
    from jaxblend.sources import MockSource
    from jaxblend.sources.schema import GPTSchemaOptions

    plan = plan_token_budget(
        SequenceSource(sequences, max_length=192).lengths,
        TokenBudgetConfig(bucket_width=32, max_length=192, token_budget=1536, row_multiple=8),
    )
    mock = MockSource(1000, GPTSchemaOptions(), seq_length=16)
    with pytest.raises(ValueError, match="needs a source with get_padded_batch"):
        make_loader(mock, mesh8(), plan=plan)

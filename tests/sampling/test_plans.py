"""Step plans: fixed-size and ramp-up ids, sizes, shapes, fingerprints, bounds, pickling."""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxblend import identity
from jaxblend.sampling import (
    BatchShape,
    FixedStepPlan,
    ProcessRows,
    Rampup,
    RampupStepPlan,
)


def step_by_step(rampup: Rampup, gbs: int, steps: int) -> list[tuple[int, int]]:
    """(first sample, size) per step, by the ramp's rule applied one step at a time."""
    increments = (gbs - rampup.start) // rampup.increment
    per_increment = rampup.ramp_samples / increments
    consumed, out = 0, []
    for _ in range(steps):
        if consumed > rampup.ramp_samples:
            size = gbs
        else:
            size = rampup.start + int(consumed / per_increment) * rampup.increment
        out.append((consumed, size))
        consumed += size
    return out


class TestFixedStepPlan:
    def test_ids_are_consecutive_batches(self):
        plan = FixedStepPlan(global_batch_size=8, num_steps=5)
        for k in range(5):
            ids = plan.sample_ids(k)
            assert ids.dtype == np.int64 and plan.batch_size(k) == 8
            np.testing.assert_array_equal(ids, np.arange(8 * k, 8 * k + 8))
            assert plan.padded_length(k) is None
        assert plan.num_samples == 40 and plan.batch_shapes() == {BatchShape(8, None)}
        assert plan.fingerprint == identity.fingerprint("fixed_step_plan", 1, global_batch_size=8)
        assert FixedStepPlan(8, 7).fingerprint == plan.fingerprint  # not the number of steps
        assert FixedStepPlan(16, 5).fingerprint != plan.fingerprint
        assert FixedStepPlan(8, 0).batch_shapes() == frozenset()

    def test_covering_and_bounds(self):
        assert FixedStepPlan.covering(100, 16).num_steps == 6
        assert FixedStepPlan.covering(100, 16, num_steps=2).num_steps == 2
        with pytest.raises(ValueError, match="num_steps=7 needs 112 samples but the source has 100"):
            FixedStepPlan.covering(100, 16, num_steps=7)
        with pytest.raises(IndexError, match=r"step 6 out of range \[0, 6\)"):
            FixedStepPlan(16, 6).sample_ids(6)
        with pytest.raises(ValueError, match="num_steps"):
            FixedStepPlan(16, -1)

    def test_huge_step_ids_do_not_overflow(self):
        plan = FixedStepPlan(global_batch_size=4096, num_steps=2**22)
        assert int(plan.sample_ids(2**22 - 1)[-1]) == 2**34 - 1


class TestRampupStepPlan:
    @pytest.mark.parametrize(
        "rampup, gbs",
        [(Rampup(4, 4, 100), 32), (Rampup(3, 3, 77), 30), (Rampup(8, 8, 1000), 64),
         (Rampup(10, 10, 1), 50), (Rampup(6, 2, 2345), 40)],
    )
    def test_sizes_and_ids_follow_consumed_samples(self, rampup, gbs):
        plan = RampupStepPlan(rampup, gbs, num_steps=300)
        expected = step_by_step(rampup, gbs, 300)
        for k, (first, size) in enumerate(expected):
            assert plan.batch_size(k) == size
            np.testing.assert_array_equal(plan.sample_ids(k), np.arange(first, first + size))
        assert plan.num_samples == expected[-1][0] + expected[-1][1]
        assert plan.batch_shapes() == {BatchShape(s, None) for _, s in expected}
        assert plan.batch_size(plan.ramp_steps) == gbs and plan.batch_size(plan.ramp_steps - 1) < gbs

    def test_million_steps_are_cheap_and_exact(self):
        rampup = Rampup(32, 32, 5_859_375)
        plan = RampupStepPlan(rampup, 1536, num_steps=1_000_000)
        assert len(plan.batch_shapes()) == (1536 - 32) // 32 + 1
        k = plan.ramp_steps
        expected = step_by_step(rampup, 1536, k + 3)
        assert plan.first_sample(k + 2) == expected[k + 2][0]
        last = plan.sample_ids(999_999)
        assert int(last[0]) == expected[k][0] + (999_999 - k) * 1536 and last.size == 1536

    def test_covering_and_steps_within(self):
        rampup = Rampup(2, 2, 20)
        plan = RampupStepPlan.covering(100, rampup, 8)
        assert plan.num_samples <= 100 < plan.num_samples + 8
        with pytest.raises(ValueError, match="needs .* samples but the source has 100"):
            RampupStepPlan.covering(100, rampup, 8, num_steps=plan.num_steps + 1)
        for n in range(120):
            k = plan.steps_within(n)
            assert plan.first_sample(k) <= n < plan.first_sample(k + 1)

    def test_rounding_with_decrease_batch_size_if_needed(self):
        plan = RampupStepPlan(Rampup(6, 6, 50), 54, num_steps=40, micro_batch_size=1,
                              data_parallel_size=4, decrease_batch_size_if_needed=True)
        sizes = {plan.batch_size(k) for k in range(40)}
        assert all(s % 4 == 0 for s in sizes) and 4 in sizes and 52 in sizes
        plain = RampupStepPlan(Rampup(6, 6, 50), 54, 40)
        assert plan.fingerprint != plain.fingerprint  # rounding changes the batches
        assert plain.fingerprint == identity.fingerprint(
            "rampup_step_plan", 1, start=6, increment=6, ramp_samples=50, global_batch_size=54
        )

    @pytest.mark.parametrize(
        "change", [{"rampup": Rampup(6, 12, 50)}, {"rampup": Rampup(6, 6, 60)},
                   {"global_batch_size": 60}],
    )
    def test_fingerprint_changes_with_the_ramp(self, change):
        base = {"rampup": Rampup(6, 6, 50), "global_batch_size": 54, "num_steps": 10}
        assert RampupStepPlan(**{**base, **change}).fingerprint != RampupStepPlan(**base).fingerprint
        assert RampupStepPlan(**{**base, "num_steps": 20}).fingerprint == RampupStepPlan(**base).fingerprint

    @pytest.mark.parametrize(
        "kwargs, match",
        [
            ({"rampup": Rampup(64, 32, 100), "global_batch_size": 64}, "START must be below"),
            ({"rampup": Rampup(8, 3, 100), "global_batch_size": 64}, "multiple of INCREMENT"),
            ({"rampup": Rampup(6, 6, 100), "global_batch_size": 36, "data_parallel_size": 4},
             "not a multiple of micro_batch_size x data_parallel_size = 4"),
            ({"rampup": Rampup(2, 6, 50), "global_batch_size": 50, "data_parallel_size": 4,
              "decrease_batch_size_if_needed": True}, "rounds down to 0 rows"),
        ],
    )
    def test_bad_configurations(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            RampupStepPlan(num_steps=10, **kwargs)

    def test_parse(self):
        assert Rampup.parse("32 32 1000") == Rampup(32, 32, 1000)
        assert Rampup.parse("32,32,1000") == Rampup(32, 32, 1000)  # Megatron's nargs, joined
        for bad in ("32 32", "a b c", "32 0 100", ""):
            with pytest.raises(ValueError, match="--rampup_batch_size"):
                Rampup.parse(bad)


def test_plans_pickle_and_process_rows():
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "tensor"))
    sharding = NamedSharding(mesh, P("data"))
    plan = RampupStepPlan(Rampup(8, 8, 64), 32, num_steps=20)
    again = pickle.loads(pickle.dumps(plan))
    for k in range(20):
        np.testing.assert_array_equal(again.sample_ids(k), plan.sample_ids(k))
    share = pickle.loads(pickle.dumps(ProcessRows.of(plan, sharding, 0)))
    assert sorted(share.rows_by_size) == sorted(s.rows for s in plan.batch_shapes())
    for k in range(20):  # one process holds every row of a one-process mesh
        np.testing.assert_array_equal(share.sample_ids(k), plan.sample_ids(k))
    with pytest.raises(ValueError, match="batches of 2 rows, which the mesh's batch axes"):
        ProcessRows.of(RampupStepPlan(Rampup(2, 2, 64), 12, 20), sharding, 0)

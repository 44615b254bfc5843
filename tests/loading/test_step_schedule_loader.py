"""The loader over a step batch-size schedule (`--step_batch_size_schedule`): batches of the
schedule's sizes in Megatron's order, and a resume in the middle of the schedule on another mesh."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxblend.loading import make_loader
from jaxblend.sampling import StepBatchSchedule, StepBatchSchedulePlan
from jaxblend.sources import MockSource
from jaxblend.sources.schema import GPTSchemaOptions

# Thresholds in tokens of 32-token samples: 320 // 32 = 10, 1K // 32 = 31. Steps: 0, 8 -> 8;
# 16 -> 16 (past 10); 32 -> 24 (past 31); 56 -> 24: 80 samples in 5 steps.
PLAN = StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:8 320:16 1K:24", 32), 5)


def mesh(shape, axes):
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), axes)


def host(batch):
    return {k: np.asarray(v) for k, v in batch.items()}


@pytest.fixture(scope="module")
def source():
    opts = GPTSchemaOptions(eod_id=99, reset_position_ids=True)
    return MockSource(96, opts, seq_length=32, vocab_size=100, seed=5, mean_doc_length=9)


def test_batches_follow_the_schedule_in_megatron_order(source):
    got = [host(b) for b in make_loader(source, mesh((8,), ("data",)), plan=PLAN)]
    assert [b["inputs"].shape[0] for b in got] == [8, 8, 16, 24, 24]
    for k, batch in enumerate(got):
        expected = source.get_batch(np.arange(PLAN.first_sample(k), PLAN.first_sample(k + 1)))
        for key in expected:
            np.testing.assert_array_equal(batch[key], expected[key], err_msg=key)


def test_resume_mid_schedule_on_another_mesh(source):
    full = [host(b) for b in make_loader(source, mesh((8,), ("data",)), plan=PLAN)]
    loader = make_loader(source, mesh((8,), ("data",)), plan=PLAN)
    next(loader), next(loader), next(loader)
    state = json.loads(json.dumps(loader.state()))
    assert state["step"] == 3 and PLAN.batch_size(2) != PLAN.batch_size(3)
    again = StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:8 320:16 1K:24", 32), 5)
    rest = [host(b) for b in make_loader(
        source, mesh((2, 4), ("data", "fsdp")), plan=again, batch_axes=("data", "fsdp"), state=state,
    )]
    for x, y in zip(full[3:], rest, strict=True):
        for key in x:
            assert x[key].tobytes() == y[key].tobytes(), key
    other = StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:8 320:16 1K:32", 32), 5)
    with pytest.raises(ValueError, match="different source or plan"):
        make_loader(source, mesh((8,), ("data",)), plan=other, state=state)


# Resume on more data shards than the early batches allow. Thresholds in samples: 10 steps of 4
# rows (samples 0..40), then 16 rows: 13 steps, 88 samples. 4 rows split over 2 data shards, not
# over 8; 16 rows split over both.
EARLY = StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:4 40:16"), 13)
GROWN = 10  # the first 16-row step


def saved_state(source, step):
    loader = make_loader(source, mesh((2,), ("data",)), plan=EARLY, start_step=step)
    return json.loads(json.dumps(loader.state()))


class TestResumeOnMoreDataShards:
    def test_state_in_the_later_phase_resumes_on_8_shards(self, source):
        full = [host(b) for b in make_loader(source, mesh((2,), ("data",)), plan=EARLY)]
        assert [b["inputs"].shape[0] for b in full] == [4] * GROWN + [16] * 3
        state = saved_state(source, GROWN + 1)
        loader = make_loader(source, mesh((8,), ("data",)), plan=EARLY, state=state)
        assert loader.step == GROWN + 1 and loader.process_rows.from_step == GROWN + 1
        rest = [host(b) for b in loader]
        assert len(rest) == 13 - GROWN - 1
        for x, y in zip(full[GROWN + 1:], rest, strict=True):
            for key in x:
                assert x[key].tobytes() == y[key].tobytes(), key
        started = [host(b) for b in make_loader(
            source, mesh((4, 2), ("data", "fsdp")), plan=EARLY, batch_axes=("data", "fsdp"),
            start_step=GROWN,
        )]
        for x, y in zip(full[GROWN:], started, strict=True):
            for key in x:
                assert x[key].tobytes() == y[key].tobytes(), key

    def test_from_step_0_on_8_shards_is_refused_with_one_line(self, source):
        with pytest.raises(ValueError, match="batches of 4 rows, which the mesh's batch axes") as err:
            make_loader(source, mesh((8,), ("data",)), plan=EARLY)
        assert "\n" not in str(err.value)

    def test_state_before_the_later_phase_is_refused_with_one_line(self, source):
        state = saved_state(source, GROWN - 1)
        with pytest.raises(ValueError, match=f"batches of 4 rows at or after step {GROWN - 1}") as err:
            make_loader(source, mesh((8,), ("data",)), plan=EARLY, state=state)
        assert "\n" not in str(err.value)

    def test_restore_rebuilds_the_rows_or_leaves_the_loader_as_it_was(self, source):
        full = [host(b) for b in make_loader(source, mesh((2,), ("data",)), plan=EARLY)]
        loader = make_loader(source, mesh((8,), ("data",)), plan=EARLY, start_step=12)
        with pytest.raises(ValueError, match=f"batches of 4 rows at or after step {GROWN - 1}"):
            loader.restore(saved_state(source, GROWN - 1))
        assert loader.step == 12 and loader.process_rows.from_step == 12
        assert host(next(loader))["inputs"].tobytes() == full[12]["inputs"].tobytes()
        loader.restore(saved_state(source, GROWN))  # earlier than built for, still 16 rows
        assert loader.process_rows.from_step == GROWN
        rest = [host(b) for b in loader]
        for x, y in zip(full[GROWN:], rest, strict=True):
            for key in x:
                assert x[key].tobytes() == y[key].tobytes(), key

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
    opts = GPTSchemaOptions(seq_length=32, eod_id=99, reset_position_ids=True)
    return MockSource(96, opts, vocab_size=100, seed=5, mean_doc_length=9)


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

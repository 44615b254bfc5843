"""A staged split's resume state: future stage edits accepted, past ones refused in one line."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxblend.loading import make_loader
from jaxblend.loading.resume_history import StagedHistory
from jaxblend.sampling import DataSchedule, DataStage, FixedStepPlan
from jaxblend.sources import MockSource
from jaxblend.sources.schema import GPTSchemaOptions

B = 8
SRC = "--data_schedule sched.json"


def _mesh():
    return Mesh(np.array(jax.devices()[:4]), ("data",))


@pytest.fixture(scope="module")
def source():
    return MockSource(B * 20, GPTSchemaOptions(eod_id=0), seq_length=16, vocab_size=50, seed=1)


def _schedule(*stages) -> DataSchedule:
    return DataSchedule(tuple(DataStage(s, b) for s, b in stages), SRC)


BASE = _schedule((0, ("50", "/d/a", "50", "/d/b")), (5, ("/d/c",)), (12, ("20", "/d/a", "80", "/d/c")))


class _Identity:
    """The identity of samples [0, n) of a staged split under `schedule`: its stages cut to the
    samples (as the index layer's history fingerprint is)."""

    def __init__(self, schedule: DataSchedule, salt: str = ""):
        self.schedule, self.salt = schedule, salt

    def __call__(self, num_samples: int) -> str:
        cut = [(s.start_step, list(s.blend)) for s in self.schedule.stages if s.start_step * B < num_samples]
        return json.dumps([self.salt, cut])


def _loader(source, schedule, salt="", **kw):
    return make_loader(
        source, _mesh(), plan=FixedStepPlan(B, 20),
        history=StagedHistory(schedule, _Identity(schedule, salt)), **kw,
    )


def _state_at(source, step):
    loader = _loader(source, BASE, start_step=step)
    state = loader.state()
    loader.close()
    return json.loads(json.dumps(state))


def test_state_saves_the_schedule_and_resumes_with_it(source):
    state = _state_at(source, 8)
    assert state["step"] == 8 and state["data_schedule"] == BASE.to_json()
    assert _loader(source, BASE, state=state).step == 8


def test_a_future_edit_is_accepted(source):
    state = _state_at(source, 8)
    future = _schedule(*[(s.start_step, s.blend) for s in BASE.stages[:2]], (9, ("/d/a",)))
    assert _loader(source, future, state=state).step == 8
    dropped = _schedule(*[(s.start_step, s.blend) for s in BASE.stages[:2]])
    assert _loader(source, dropped, state=state).step == 8


def test_a_past_edit_is_refused_naming_the_first_changed_stage(source):
    state = _state_at(source, 8)
    past = _schedule((0, ("50", "/d/a", "50", "/d/b")), (5, ("/d/b",)), (12, ("/d/c",)))
    with pytest.raises(ValueError) as err:
        _loader(source, past, state=state)
    message = str(err.value)
    assert message == (
        f"{SRC}: stage 1 (start_step 5) differs from the checkpoint's schedule before the resume "
        "step 8; past steps cannot change: restore the checkpoint's stages up to step 8 (edit "
        "only stages that start at or after step 8)"
    )
    removed = _schedule((0, ("50", "/d/a", "50", "/d/b")))
    with pytest.raises(ValueError, match=r"the checkpoint's stage 1 \(start_step 5\) is missing"):
        _loader(source, removed, state=state)


def test_another_change_keeps_the_generic_refusal(source):
    state = _state_at(source, 8)
    with pytest.raises(ValueError, match="different data configuration"):
        _loader(source, BASE, salt="other seed", state=state)


def test_schedule_and_no_schedule_do_not_mix(source):
    state = _state_at(source, 8)
    with pytest.raises(ValueError, match="saved by a run with a data schedule"):
        make_loader(source, _mesh(), plan=FixedStepPlan(B, 20), state=state)
    plain = make_loader(source, _mesh(), plan=FixedStepPlan(B, 20), start_step=8).state()
    with pytest.raises(ValueError, match="saved by a run without a data schedule"):
        _loader(source, BASE, state=plain)

"""DataSchedule: the JSON format, its one-line errors, steps -> samples, and edits before a step."""

from __future__ import annotations

import json

import pytest

from jaxblend.sampling import DataSchedule, DataStage, FixedStepPlan, RampupStepPlan
from jaxblend.sampling.data_schedule import first_sample
from jaxblend.sampling.rampup import Rampup
from jaxblend.sampling.step_batch_schedule import StepBatchSchedule, StepBatchSchedulePlan

SRC = "--data_schedule sched.json"


def _text(stages) -> str:
    return json.dumps({"stages": stages})


def _three() -> DataSchedule:
    return DataSchedule.from_json_text(
        _text([
            {"start_step": 0, "blend": ["50", "/d/a", "50", "/d/b"]},
            {"start_step": 10, "blend": "20 /d/a 80 /d/c"},
            {"start_step": 25, "blend": ["/d/c"]},
        ]),
        SRC,
    )


def test_parses_every_blend_form_and_round_trips():
    s = _three()
    assert [st.start_step for st in s.stages] == [0, 10, 25]
    assert tuple(s.stages[0].blend) == ("50", "/d/a", "50", "/d/b")
    assert tuple(s.stages[1].blend) == ("20", "/d/a", "80", "/d/c")
    assert tuple(s.stages[2].blend) == ("/d/c",)
    assert s.prefixes() == ["/d/a", "/d/b", "/d/c"]
    again = DataSchedule.from_json(json.loads(json.dumps(s.to_json())), "x")
    assert again == s


def test_numeric_weights_are_accepted():
    s = DataSchedule.from_json_text(_text([{"start_step": 0, "blend": [30, "/d/a", 0.5, "/d/b"]}]), SRC)
    assert tuple(s.stages[0].blend) == ("30", "/d/a", "0.5", "/d/b")


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ("not json", "not JSON"),
        (json.dumps({"stages": []}), "non-empty list"),
        (json.dumps({"stage": []}), "unknown keys ['stage']"),
        (json.dumps([1]), "expected an object"),
        (json.dumps({}), 'no "stages" entry'),
        (_text([{"start_step": 0, "blend": "/d/a", "weight": 1}]), "stage 0: unknown keys ['weight']"),
        (_text([{"blend": "/d/a"}]), "stage 0: missing ['start_step']"),
        (_text([{"start_step": 5, "blend": "/d/a"}]), "stage 0 (start_step 5) must start at step 0"),
        (_text([{"start_step": 0, "blend": "/d/a"}, {"start_step": 0, "blend": "/d/b"}]),
         "stage 1 (start_step 0) does not start after stage 0"),
        (_text([{"start_step": 0, "blend": "/d/a"}, {"start_step": 1.5, "blend": "/d/b"}]),
         "stage 1: start_step must be an integer"),
        (_text([{"start_step": 0, "blend": []}]), "stage 0 (start_step 0): blend is empty"),
        (_text([{"start_step": 0, "blend": ["50", "/d/a", "50"]}]), "odd length"),
        (_text([{"start_step": 0, "blend": ["-1", "/d/a", "2", "/d/b"]}]), "negative"),
        (_text([{"start_step": 0, "blend": ["0", "/d/a", "2", "/d/b"]}]), "must be > 0"),
        (_text([{"start_step": 0, "blend": ["x", "/d/a", "2", "/d/b"]}]), "mixes weights"),
        (_text([{"start_step": 0, "blend": ["/d/a", "/d/b"]}]), "several datasets but no weights"),
        (_text([{"start_step": 0, "blend": ["1", "/d/a", "2", "/d/a"]}]), "names dataset '/d/a' twice"),
        (_text([{"start_step": 0, "blend": {"a": 1}}]), "blend must be a list"),
    ],
)
def test_bad_files_give_one_line_naming_the_file(doc, expected):
    with pytest.raises(ValueError) as err:
        DataSchedule.from_json_text(doc, SRC)
    message = str(err.value)
    assert message.startswith(SRC), message
    assert expected in message, message
    assert "\n" not in message


def test_stage_of_and_cut():
    s = _three()
    assert [s.stage_of(k) for k in (0, 9, 10, 24, 25, 1000)] == [0, 0, 1, 1, 2, 2]
    assert len(s.cut(10)) == 1 and len(s.cut(11)) == 2 and len(s.cut(26)) == 3


def test_blend_schedule_steps_to_samples_fixed_plan():
    s = _three()
    plan = FixedStepPlan(4, 30)
    assert s.start_samples(plan) == [0, 40, 100]


def test_start_samples_follow_rampup():
    s = _three()
    plan = RampupStepPlan(Rampup(2, 2, 40), 8, 30)
    expected = [sum(plan.batch_size(j) for j in range(k)) for k in (0, 10, 25)]
    assert s.start_samples(plan) == expected
    assert expected[1] != 10 * 8  # the ramp makes the early steps smaller


def test_start_samples_follow_step_batch_size_schedule():
    s = _three()
    plan = StepBatchSchedulePlan(StepBatchSchedule.from_megatron("0:2 30:6"), 30)
    expected = [sum(plan.batch_size(j) for j in range(k)) for k in (0, 10, 25)]
    assert s.start_samples(plan) == expected
    assert first_sample(plan, 25) == expected[2]


def test_a_stage_at_or_after_the_last_step_is_refused():
    s = _three()
    with pytest.raises(ValueError, match=r"stage 2 \(start_step 25\) starts at or after the end of the run \(25 steps"):
        s.start_samples(FixedStepPlan(4, 25))
    s.start_samples(FixedStepPlan(4, 26))


def test_first_change_before():
    s = _three()
    future = DataSchedule((s.stages[0], s.stages[1], DataStage(30, ("/d/b",))))
    assert s.first_change_before(future, 25) is None
    assert s.first_change_before(future, 26) == 2
    past = DataSchedule((s.stages[0], DataStage(10, ("30", "/d/a", "70", "/d/c")), s.stages[2]))
    assert s.first_change_before(past, 10) is None
    assert s.first_change_before(past, 11) == 1
    moved = DataSchedule((s.stages[0], DataStage(12, s.stages[1].blend), s.stages[2]))
    assert s.first_change_before(moved, 11) == 1
    assert s.first_change_before(moved, 10) is None
    dropped = DataSchedule(s.stages[:2])
    assert s.first_change_before(dropped, 25) is None
    assert s.first_change_before(dropped, 40) == 2
    # the same normalized weights draw the same samples
    scaled = DataSchedule((DataStage(0, ("1", "/d/a", "1", "/d/b")), *s.stages[1:]))
    assert s.first_change_before(scaled, 100) is None


def test_token_budget_like_plans_are_refused():
    class Unordered:
        num_steps = 10

    with pytest.raises(ValueError, match="needs a step plan"):
        first_sample(Unordered(), 3)


def test_blend_schedule_gives_the_index_layer_stages():
    from jaxblend.index import BlendSchedule

    staged = _three().blend_schedule(FixedStepPlan(4, 30))
    assert isinstance(staged, BlendSchedule)
    assert [(s.start_sample, tuple(s.blend)) for s in staged.stages] == [
        (0, ("50", "/d/a", "50", "/d/b")), (40, ("20", "/d/a", "80", "/d/c")), (100, ("/d/c",)),
    ]
    assert staged.prefixes() == ["/d/a", "/d/b", "/d/c"]

"""`--step_batch_size_schedule`: the flag to the plan, its thresholds in tokens of `--seq_length`,
one-line refusals beside `--rampup_batch_size` or `--global_batch_size`, Megatron's spelling."""

from __future__ import annotations

import contextlib

import pytest
from absl import app, flags

from jaxblend.cli import steps
from jaxblend.cli.megatron_argv import normalize_argv
from jaxblend.sampling import FixedStepPlan, StepBatchSchedule, StepBatchSchedulePlan
from tests.cli.conftest import step_settings


@contextlib.contextmanager
def given_on_the_command_line(fl, name):
    """Marks a flag as given on the command line (absl's `present`) for the block."""
    before = fl[name].present
    fl[name].present = 1
    try:
        yield
    finally:
        fl[name].present = before


def test_schedule_in_tokens_of_the_sequence_length(fl):
    fl.seq_length, fl.step_batch_size_schedule = 128, "0:2 1K:4 2.5K:8"  # samples 0, 7, 19
    plan = step_settings(16).covering(100, 9)
    assert plan == StepBatchSchedulePlan(StepBatchSchedule((0, 7, 19), (2, 4, 8)), 9)
    assert [plan.batch_size(k) for k in range(9)] == [2, 2, 2, 2, 4, 4, 4, 8, 8]
    assert step_settings(16).samples_for(9) == 36
    assert step_settings(16).final_global_batch_size == 8
    whole = step_settings(16).covering(100)
    assert whole.num_steps == 9 + (100 - 36) // 8


def test_without_a_sequence_length_thresholds_are_samples(fl):
    fl.seq_length, fl.step_batch_size_schedule = None, "0:2 1K:4"
    assert step_settings().batch_schedule() == StepBatchSchedule((0, 1000), (2, 4))


def test_planned_steps_show_every_shape(fl):
    fl.seq_length, fl.step_batch_size_schedule = 128, "0:2 1K:4 2.5K:8"
    plan = step_settings(16).planned()
    assert plan.num_steps == 8  # the last entry begins at step 7
    assert {shape.rows for shape in plan.batch_shapes()} == {2, 4, 8}
    assert step_settings(16).planned(3).num_steps == 3


def test_no_schedule_leaves_the_other_plans(fl):
    assert step_settings().batch_schedule() is None
    assert step_settings(10).covering(100, 4) == FixedStepPlan.covering(100, 10, 4)
    assert step_settings(10).final_global_batch_size == 10


def test_a_bad_schedule_is_one_line_naming_the_flag(fl):
    fl.seq_length, fl.step_batch_size_schedule = 128, "0:8 1K:16 1.01K:32"  # both sample 7
    with pytest.raises(app.UsageError) as err:
        step_settings(16).covering(100, 4)
    message = str(err.value)
    assert message.startswith("--step_batch_size_schedule='0:8 1K:16 1.01K:32': ")
    assert "strictly increasing" in message and "\n" not in message


def test_too_few_samples_for_the_steps(fl):
    fl.step_batch_size_schedule = "0:4 10:8"
    with pytest.raises(app.UsageError, match="needs 68 samples but the source has 50 \\(7 steps\\)"):
        step_settings(16).covering(50, 10)


def test_the_schedule_and_a_ramp_are_refused_together(fl):
    fl.step_batch_size_schedule, fl.rampup_batch_size = "0:4 10:8", "4 4 16"
    settings = step_settings(12)
    for call in (lambda: settings.covering(100, 4), lambda: settings.planned()):
        with pytest.raises(app.UsageError, match="--step_batch_size_schedule and "
                           "--rampup_batch_size both describe the batch-size schedule: give one"):
            call()


def test_an_explicit_global_batch_size_is_refused(fl):
    fl.step_batch_size_schedule = "0:4 10:8"
    with (given_on_the_command_line(fl, "global_batch_size"),
          pytest.raises(app.UsageError, match="drop --global_batch_size")):
        step_settings(12).covering(100, 4)
    assert step_settings(12).covering(100, 4).num_steps == 4  # the default value is not "given"


def test_megatrons_spelling_is_one_quoted_argument():
    argv = ["prog", "--step-batch-size-schedule", "0:768 250B:1536", "--rampup-batch-size", "1",
            "2", "3"]
    defined = {"step_batch_size_schedule", "rampup_batch_size"}
    normal = normalize_argv(argv, defined, steps.MEGATRON_NARGS)
    assert normal == ["prog", "--step_batch_size_schedule", "0:768 250B:1536",
                      "--rampup_batch_size=1,2,3"]
    values = flags.FlagValues()
    flags.DEFINE_string("step_batch_size_schedule", None, "", flag_values=values)
    flags.DEFINE_string("rampup_batch_size", None, "", flag_values=values)
    values(normal)
    assert values.step_batch_size_schedule == "0:768 250B:1536"

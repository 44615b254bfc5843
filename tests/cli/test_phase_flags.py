"""`--phase_transition_iterations`: the flag to the phases, one-line refusals beside a batch-size
ramp-up or schedule, the phase-sized train split, Megatron's spelling."""

from __future__ import annotations

import pytest
from absl import app

from jaxblend import cli
from jaxblend.cli import phase_flags
from jaxblend.cli.megatron_argv import normalize_argv
from jaxblend.sampling import PhaseTransitions


@pytest.fixture
def pfl(fl):
    if "phase_transition_iterations" not in fl:
        phase_flags.define_phase_flags()
    yield fl
    fl.phase_transition_iterations = None


def test_without_the_flag_there_are_no_phases(pfl):
    assert phase_flags.phase_transitions_from_flags(8, 300) is None


def test_the_flag_gives_the_phases(pfl):
    pfl.phase_transition_iterations = "200,100"
    assert phase_flags.phase_transitions_from_flags(8, 300) == PhaseTransitions((100, 200), 8, 300)
    assert phase_flags.phase_transitions_from_flags(8, 300, 2500).end_sample == 2500


@pytest.mark.parametrize("other", ["rampup_batch_size", "step_batch_size_schedule"])
def test_a_changing_batch_size_is_one_line(pfl, other):
    pfl.phase_transition_iterations = "100"
    pfl[other].value = "8 8 64" if other == "rampup_batch_size" else "0:8 100:16"
    try:
        with pytest.raises(app.UsageError, match="requires a fixed global batch size") as err:
            phase_flags.phase_transitions_from_flags(8, 300)
    finally:
        pfl[other].value = None
    assert f"drop --{other}" in str(err.value) and "\n" not in str(err.value)


def test_a_bad_value_is_one_line_naming_the_flag(pfl):
    pfl.phase_transition_iterations = "100,300"
    with pytest.raises(app.UsageError, match=r"--phase_transition_iterations: transition 300"):
        phase_flags.phase_transitions_from_flags(8, 300)


def test_dump_batches_phase_needs_train_samples_and_takes_the_start_steps_phase(pfl):
    pfl.phase_transition_iterations = "4,9"
    pfl.train_samples = None
    with pytest.raises(app.UsageError, match="needs --train_samples"):
        phase_flags.dump_phase_plan_from_flags(8, 0)
    pfl.train_samples = 14 * 8 + 3
    plan = phase_flags.dump_phase_plan_from_flags(8, 5)
    assert (plan.phase, plan.first_step, plan.num_steps) == (1, 4, 9)
    last = phase_flags.dump_phase_plan_from_flags(8, 9)
    assert last.num_steps == 14 and last.num_samples == 14 * 8 + 3 - 9 * 8
    with pytest.raises(app.UsageError, match="outside the run's 14 steps"):
        phase_flags.dump_phase_plan_from_flags(8, 14)


def test_the_train_split_is_sized_for_the_phase():
    values = cli.DataFlagValues(data_path=("/d/a",), split="99,1,0", seq_length=8,
                                train_samples=2400, valid_samples=32, test_samples=0)
    plan = PhaseTransitions((100, 250), 8, 300).plan(1)
    assert cli.assemble(values, phase=plan).config.num_samples == (1200, 32, 0)


def test_megatrons_spelling():
    argv = ["prog", "--phase-transition-iterations", "100,200", "--global-batch-size", "8"]
    assert normalize_argv(argv, {"phase_transition_iterations", "global_batch_size"}) == [
        "prog", "--phase_transition_iterations", "100,200", "--global_batch_size", "8"]


def test_the_relaunch_line_names_the_next_phase():
    plan = PhaseTransitions((100, 200), 8, 300).plan(0)
    line = phase_flags.relaunch_line(plan, "/ck")
    assert line.startswith("phase 1 of 3 ended at step 100 (checkpoint saved in /ck)")
    assert "phase 2's data flags" in line and "steps [100, 200)" in line and "800 samples" in line

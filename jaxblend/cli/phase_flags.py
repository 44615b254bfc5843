"""`--phase_transition_iterations`: Megatron-LM's phase transitions, for migration.

Megatron-LM's `--phase-transition-iterations "100,200"` (that spelling is accepted too) splits a
run into phases: at a listed step `jaxblend.train` saves a checkpoint and exits 0, and the next
launch, given the next phase's data flags, trains that phase on a fresh blend of the phase's
length read from its first sample (`jaxblend.sampling.PhaseTransitions`). `dump_batches` dumps the
steps of the phase holding `--start_step`; `inspect explain`/`mixture` show the phase holding
`--step`/`--start_step` (a step range may not cross a transition). The global batch size must stay fixed (no ramp-up, no
batch-size schedule) and the flag does not combine with staged blends (`--data_schedule`), which
continue one stream across stages instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from absl import app, flags

from jaxblend.cli import flag_help
from jaxblend.cli.entry import usage_errors

if TYPE_CHECKING:
    from jaxblend.sampling import PhaseStepPlan, PhaseTransitions

FLAG = "--phase_transition_iterations"


def define_phase_flags() -> None:
    """Defines `--phase_transition_iterations`."""
    with flag_help.group(flag_help.STEPS):
        flags.DEFINE_string(
            "phase_transition_iterations", None,
            "Megatron-LM's --phase-transition-iterations: comma-separated steps, e.g. '100,200'. At "
            "each the run saves a checkpoint and exits; relaunch it with the next phase's data flags "
            "(and the same --global_batch_size): each phase trains on a fresh blend of its own "
            "length, read from its first sample. Needs a fixed global batch size (default: none, "
            "one phase).",
        )


def check_phase_combinations() -> None:
    """Refuses `--phase_transition_iterations` beside `--data_schedule`, a batch-size ramp-up or
    schedule (also where the phases themselves are not needed: `inspect` of a validation split).

    Raises:
      app.UsageError: one line naming the flags.
    """
    fl = flags.FLAGS
    if fl.phase_transition_iterations is None:
        return
    for name in ("rampup_batch_size", "step_batch_size_schedule"):
        if name in fl and fl[name].value:
            raise app.UsageError(
                f"{FLAG} requires a fixed global batch size (Megatron compares it at every "
                f"resume): drop --{name}"
            )
    if "data_schedule" in fl and fl["data_schedule"].value:
        raise app.UsageError(
            f"{FLAG} (Megatron's phases: a fresh blend per launch) and --data_schedule (staged "
            "blends continuing one stream) both describe the mixture over time: give one"
        )


def phase_transitions_from_flags(
    global_batch_size: int, train_steps: int, train_samples: int | None = None
) -> PhaseTransitions | None:
    """The phases of `--phase_transition_iterations`, or None without the flag.

    Args:
      global_batch_size: the run's fixed global batch size.
      train_steps: the run's steps (`--train_iters`).
      train_samples: where the last phase's samples end (Megatron's `--train-samples`); None:
        `train_steps x global_batch_size`.

    Raises:
      app.UsageError: one line: a bad value, or the flag with a batch-size ramp-up, a batch-size
        schedule or `--data_schedule`.
    """
    from jaxblend.sampling import PhaseTransitions

    value = flags.FLAGS.phase_transition_iterations
    if value is None:
        return None
    check_phase_combinations()
    with usage_errors():
        return PhaseTransitions.parse(value, global_batch_size, train_steps, train_samples)


def dump_phase_plan_from_flags(global_batch_size: int, start_step: int) -> PhaseStepPlan | None:
    """The plan of the phase holding `start_step`, for tools that read a phase's batches
    (`dump_batches`): the run ends at `--train_samples` (Megatron's `--train-samples`).

    Raises:
      app.UsageError: one line: as `phase_transitions_from_flags`, no `--train_samples`, or a
        start step outside the run.
    """
    fl = flags.FLAGS
    if fl.phase_transition_iterations is None:
        return None
    if fl.train_samples is None:
        raise app.UsageError(
            f"{FLAG} needs --train_samples: the run's samples (--train_iters x "
            "--global_batch_size), where the last phase ends"
        )
    transitions = phase_transitions_from_flags(
        global_batch_size, fl.train_samples // global_batch_size, fl.train_samples
    )
    if not 0 <= start_step < transitions.train_steps:
        raise app.UsageError(
            f"step {start_step} is outside the run's {transitions.train_steps} steps "
            f"(--train_samples={fl.train_samples} / --global_batch_size={global_batch_size})"
        )
    return transitions.plan(transitions.phase_of(start_step))


def relaunch_line(plan: PhaseStepPlan, directory: str) -> str:
    """What a job prints when it exits at the end of `plan`'s phase."""
    t = plan.transitions
    nxt = plan.phase + 1
    first, end = t.step_range(nxt)
    return (
        f"phase {plan.phase + 1} of {t.num_phases} ended at step {plan.num_steps} (checkpoint "
        f"saved in {directory}); exiting: relaunch with phase {nxt + 1}'s data flags "
        f"(--data_path & co.) and the same --phase_transition_iterations, --global_batch_size "
        f"and --train_iters to train steps [{first}, {end}) on a fresh blend of "
        f"{t.phase_samples(nxt)} samples"
    )


def inspect_phase_plan_from_flags(
    global_batch_size: int, first_step: int, end_step: int | None = None
) -> PhaseStepPlan | None:
    """The plan of the phase holding `first_step`, for `inspect explain`/`mixture` of the train
    split; None without `--phase_transition_iterations`.

    A phase is one launch with its own data flags, so the steps inspected at once stay within it:
    `[first_step, end_step)` (`end_step` None: the phase's steps from `first_step` on) must not
    cross the phase's transition.

    Raises:
      app.UsageError: one line: `--data_schedule`, a batch-size ramp-up or schedule beside the
        flag, no `--train_samples`, a step outside the run, or a range crossing a transition
        (naming it) or running past the run's end.
    """
    fl = flags.FLAGS
    if fl.phase_transition_iterations is None:
        return None
    check_phase_combinations()  # before anything else: the data flags may not even parse together
    plan = dump_phase_plan_from_flags(global_batch_size, first_step)
    if end_step is None or end_step <= plan.num_steps:
        return plan
    t = plan.transitions
    if plan.phase + 1 == t.num_phases:
        raise app.UsageError(
            f"steps [{first_step}, {end_step}) run past the run's {t.train_steps} steps "
            f"(--train_samples={fl.train_samples} / --global_batch_size={global_batch_size})"
        )
    raise app.UsageError(
        f"steps [{first_step}, {end_step}) cross the phase transition at step {plan.num_steps} "
        f"(the end of phase {plan.phase + 1} of {t.num_phases}): the phases have different "
        f"data flags, so inspect one phase per command (--end_step={plan.num_steps}, then "
        f"--start_step={plan.num_steps} with the next phase's data flags)"
    )


def phase_label(plan: PhaseStepPlan) -> str:
    """`phase 2 of 3 (steps [100, 200), a fresh blend of 800 samples)` (phases numbered from 1,
    as the relaunch line does)."""
    t = plan.transitions
    return (
        f"phase {plan.phase + 1} of {t.num_phases} (steps [{plan.first_step}, {plan.num_steps}), "
        f"a fresh blend of {plan.num_samples} samples)"
    )


def phase_json(plan: PhaseStepPlan) -> dict:
    """`plan`'s phase as plain JSON: `phase` (0-based, as `PhaseTransitions.phase_of`),
    `num_phases`, its steps `[first_step, exit_step)`, `phase_samples` (its fresh blend's size),
    `run_samples` (its samples' place in the whole run) and the run's `transitions`."""
    t = plan.transitions
    return {
        "phase": plan.phase, "num_phases": t.num_phases, "label": phase_label(plan),
        "first_step": plan.first_step, "exit_step": plan.num_steps,
        "phase_samples": plan.num_samples, "run_samples": list(t.sample_range(plan.phase)),
        "transitions": t.to_json(),
    }

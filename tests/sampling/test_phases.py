"""Megatron's phase transitions: the arithmetic against Megatron's rules, the phase's step plan, and
the batches of a phase equal to a plain run over a fresh blend of the phase's length.

Megatron's rules, as `megatron/training/{arguments,training}.py` apply them (restated here, no
Megatron import: megatron-core < 0.17 lacks the feature):

* the list is sorted integers;
* a launch at iteration `it` (steps done) builds its train split with
  `next - last` samples, where `last`/`next` are the largest/smallest of
  `0, t_1 x B, ..., t_n x B, train_samples` that are `<= it x B` / `> it x B`;
* it reads that split from sample `(it - t) x B`, `t` the last transition `<= it` (or 0);
* after each step it exits (saving a checkpoint) when the new iteration is in the list.
"""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import DataAccess, GPTSchemaOptions, index, make_loader, open_gpt_sources
from jaxblend.sampling import (
    FixedStepPlan,
    PhaseStepPlan,
    PhaseTransitions,
    Rampup,
    RampupStepPlan,
    StepBatchSchedule,
    StepBatchSchedulePlan,
    TokenBudgetPlan,
)


def megatron_launches(transitions, gbs, train_iters, train_samples):
    """Simulates the launches of a Megatron run: [(first iteration, train split size, {step:
    in-split sample ids}, exit iteration)] per launch."""
    transitions = sorted(transitions)
    launches, iteration = [], 0
    while iteration < train_iters:
        bounds = [0, *(t * gbs for t in transitions), train_samples]
        current = iteration * gbs
        last = max(b for b in bounds if b <= current)
        nxt = min(b for b in bounds if b > current)
        consumed = (iteration - max(t for t in (0, *transitions) if t <= iteration)) * gbs
        first, reads = iteration, {}
        while iteration < train_iters:
            reads[iteration] = np.arange(consumed, consumed + gbs)
            consumed += gbs
            iteration += 1
            if iteration in transitions:
                break
        launches.append((first, nxt - last, reads, iteration))
    return launches


def _cases():
    rng = np.random.default_rng(22)
    cases = [
        ((100, 200), 8, 300, None), ((1,), 1, 2, None), ((5,), 3, 9, 40), ((2, 3, 4), 2, 5, 11),
    ]
    for _ in range(40):
        iters = int(rng.integers(2, 60))
        k = int(rng.integers(1, min(iters - 1, 5) + 1))
        ts = tuple(sorted(int(x) for x in rng.choice(np.arange(1, iters), k, replace=False)))
        gbs = int(rng.integers(1, 9))
        extra = int(rng.integers(0, 3 * gbs)) if rng.random() < 0.5 else None
        cases.append((ts, gbs, iters, None if extra is None else iters * gbs + extra))
    return cases


@pytest.mark.parametrize(("ts", "gbs", "iters", "train_samples"), _cases())
def test_phases_follow_megatrons_launches(ts, gbs, iters, train_samples):
    phases = PhaseTransitions(ts, gbs, iters, train_samples)
    launches = megatron_launches(ts, gbs, iters, train_samples or iters * gbs)
    assert len(launches) == phases.num_phases
    for p, (first, size, reads, exit_at) in enumerate(launches):
        assert phases.phase_of(first) == p
        assert phases.step_range(p) == (first, exit_at)
        assert phases.phase_samples(p) == size
        assert phases.exit_step(first) == (exit_at if p < len(ts) else None)
        plan = phases.plan(p)
        assert plan.num_steps == exit_at and plan.num_samples == size
        for step, ids in reads.items():
            assert phases.phase_of(step) == p
            assert phases.samples_in_phase(step) == ids[0]
            np.testing.assert_array_equal(plan.sample_ids(step), ids)
            assert plan.batch_size(step) == gbs
        assert max(ids[-1] for ids in reads.values()) < size  # the phase's split holds its reads


def test_the_example_of_the_flag():
    phases = PhaseTransitions.parse("100,200", 8, 300)
    assert [phases.sample_range(p) for p in range(3)] == [(0, 800), (800, 1600), (1600, 2400)]
    assert [phases.phase_samples(p) for p in range(3)] == [800, 800, 800]
    assert phases.samples_in_phase(150) == 400 and phases.samples_in_phase(100) == 0
    assert [phases.exit_step(k) for k in (0, 99, 100, 199, 200, 299, 300)] == [
        100, 100, 200, 200, None, None, None]
    assert phases.phase_of(300) == 2  # a finished run is in its last phase


def test_parse_sorts_like_megatron_and_a_repeat_counts_once():
    assert PhaseTransitions.parse(" 200, 50,200 ", 4, 300).iterations == (50, 200)


@pytest.mark.parametrize(("text", "message"), [
    ("0,100", "integer >= 1, got 0"),
    ("-5", "integer >= 1, got -5"),
    ("100,300", "transition 300 is outside [1, 299]"),
    ("100,400", "transition 400 is outside [1, 299]"),
    ("1e2", "expected comma-separated step numbers"),
    ("", "expected comma-separated step numbers"),
    ("100,,200", "expected comma-separated step numbers"),
])
def test_bad_transitions_are_one_line_naming_the_flag(text, message):
    with pytest.raises(ValueError, match="--phase_transition_iterations") as err:
        PhaseTransitions.parse(text, 8, 300)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unsorted_transitions_are_refused_by_the_dataclass():
    with pytest.raises(ValueError, match="strictly increasing"):
        PhaseTransitions((200, 100), 8, 300)


def test_train_samples_below_the_run_are_refused():
    with pytest.raises(ValueError, match="fewer than the run's 300 steps"):
        PhaseTransitions((100,), 8, 300, train_samples=2399)


@pytest.mark.parametrize("plan", [
    RampupStepPlan(Rampup(8, 8, 64), 32, 12),
    StepBatchSchedulePlan(StepBatchSchedule((0, 40), (4, 8)), 12),
    TokenBudgetPlan(
        np.zeros(3, np.int32), np.arange(0, 8, 2, dtype=np.int64), np.arange(6, dtype=np.int64),
        np.array([8], np.int32), np.array([2], np.int32), "tiny",
    ),
], ids=["rampup", "step_batch_size_schedule", "token_budget"])
def test_a_batch_size_that_changes_is_refused(plan):
    with pytest.raises(ValueError, match="requires a fixed global batch size") as err:
        PhaseTransitions.over(plan, "5")
    assert type(plan).__name__ in str(err.value)


def test_over_a_fixed_plan():
    phases = PhaseTransitions.over(FixedStepPlan(16, 40), "30,10")
    assert phases == PhaseTransitions((10, 30), 16, 40)


def test_the_plan_refuses_steps_outside_its_phase_and_names_its_phase():
    phases = PhaseTransitions((10, 30), 16, 40)
    plan = phases.plan(1)
    for step in (9, 30):
        with pytest.raises(IndexError, match=r"outside phase 1 \(steps \[10, 30\)\)"):
            plan.sample_ids(step)
        with pytest.raises(IndexError):
            plan.batch_size(step)
    assert plan.batch_shapes() == FixedStepPlan(16, 1).batch_shapes()
    assert plan.padded_length(10) is None
    assert pickle.loads(pickle.dumps(plan)) == plan
    fingerprints = {phases.plan(p).fingerprint for p in range(3)}
    fingerprints.add(FixedStepPlan(16, 40).fingerprint)
    fingerprints.add(PhaseTransitions((10, 31), 16, 40).plan(1).fingerprint)
    assert len(fingerprints) == 5
    assert PhaseTransitions((10, 30), 16, 40).plan(1).fingerprint == plan.fingerprint
    with pytest.raises(IndexError):
        PhaseStepPlan(phases, 3)


def _source(prefixes, weights, num_samples, cache):
    blend = [x for w, p in zip(weights, prefixes, strict=True) for x in (str(w), p)]
    config = index.GPTDataConfig(
        blend=blend, split="100,0,0", seq_length=16, seed=7, num_samples=(num_samples, None, None)
    )
    return open_gpt_sources(
        config, GPTSchemaOptions(),
        access=DataAccess.from_env().with_maps(location=str(cache)), splits=("train",),
    )["train"]


def test_a_phase_reads_a_fresh_blend_of_its_length_from_its_first_sample(tmp_path):
    rng = np.random.default_rng(3)
    prefixes = [
        write_random_dataset(str(tmp_path / name), rng, docs, lengths=(2, 50), vocab=(1, 500))
        for name, docs in (("a", 60), ("b", 90), ("c", 70))
    ]
    gbs = 8
    phases = PhaseTransitions((4, 9), gbs, 14)
    plan = phases.plan(1)  # steps [4, 9): 40 samples of the phase's own blend
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    phase_source = _source(prefixes[1:], (30, 70), plan.num_samples, tmp_path / "cache1")
    phased = list(make_loader(phase_source, mesh, plan=plan, start_step=4))
    assert len(phased) == 5
    plain_source = _source(prefixes[1:], (30, 70), 40, tmp_path / "cache2")
    plain = list(make_loader(plain_source, mesh, global_batch_size=gbs))
    assert len(plain) == 5
    for got, want in zip(phased, plain, strict=True):
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]))
    np.testing.assert_array_equal(np.asarray(phased[0]["sample_ids"]), np.arange(gbs))
    # A resume in the middle of the phase continues the same stream.
    resumed = make_loader(phase_source, mesh, plan=plan, start_step=7)
    np.testing.assert_array_equal(
        np.asarray(next(resumed)["inputs"]), np.asarray(plain[3]["inputs"])
    )

"""`DivergenceGuard`: the first non-finite loss, or a non-finite state before a save, stops the run
with one line naming the step, the last finite loss, the remedy and the checkpoint to resume from."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from jaxblend.training.divergence import DivergedError, DivergenceAdvice, DivergenceGuard

ADVICE = DivergenceAdvice(remedy="lower --lr (now 10)", checkpoint_dir="/ckpt")


def test_losses_are_read_only_when_asked_and_the_first_non_finite_one_stops():
    guard = DivergenceGuard(ADVICE, last_checkpoint=4)
    assert guard.losses() is None
    for step, loss in ((5, 3.0), (6, 2.5)):
        guard.record(step, jnp.float32(loss))
    assert guard.losses() == 2.5
    for step, loss in ((7, 2.25), (8, float("nan")), (9, float("inf"))):
        guard.record(step, jnp.float32(loss))
    with pytest.raises(DivergedError) as err:
        guard.losses()
    assert str(err.value) == (
        "training diverged at step 8: loss nan (last finite loss 2.2500 at step 7); "
        "lower --lr (now 10); then resume from the checkpoint at step 4 in /ckpt "
        "(rerun with the changed flags)"
    )


def test_a_non_finite_state_is_refused_before_a_save():
    guard = DivergenceGuard(ADVICE)
    state = {"w": jnp.ones((3, 2)), "count": jnp.int32(7)}
    guard.record(1, jnp.float32(1.5))
    guard.check_state(1, state)
    guard.saved(1)
    guard.record(2, jnp.float32(1.25))
    state["w"] = state["w"].at[2, 1].set(jnp.inf)
    with pytest.raises(DivergedError, match=(
        r"^training diverged at step 2: its update left non-finite parameters or optimizer state "
        r"\(last finite loss 1.2500 at step 2\); lower --lr \(now 10\); then resume from the "
        r"checkpoint at step 1 in /ckpt"
    )):
        guard.check_state(2, state)


def test_without_a_checkpoint_the_advice_is_to_start_over():
    guard = DivergenceGuard(ADVICE)
    guard.record(1, jnp.float32(float("nan")))
    with pytest.raises(DivergedError) as err:
        guard.losses()
    assert str(err.value).endswith(
        "(no finite loss seen in this run); lower --lr (now 10); then start over (no checkpoint "
        "was saved)"
    )

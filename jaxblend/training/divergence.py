"""Divergence: a non-finite loss stops the run, and no checkpoint ever holds a non-finite state.

`DivergenceGuard` keeps the loss of every step on the device (`record`, no host sync) and reads
the losses of the steps since its last look only when the training loop looks anyway: at a log
line (`losses`), before an evaluation and before a checkpoint (`check_state`, which also checks
that every parameter and optimizer value is finite). So a run whose loss becomes NaN or inf stops
at the latest at the next log line, evaluation or checkpoint (within `--log_interval` steps), and
a checkpoint is written only once the losses since the last look and the state it holds are
finite.

The loss is a global value (a mean over the global batch) and the state check a global
reduction, so in a multi-process run every process sees the same verdict at the same step and
stops.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class DivergedError(ValueError):
    """The loss (or the state after an update) is no longer finite; the message is one line."""


@dataclasses.dataclass(frozen=True)
class DivergenceAdvice:
    """What the stop message suggests: the settings to change, and where to resume from.

    Attributes:
      remedy: what to change, e.g. "lower --lr (now 0.1), raise --lr_warmup_iters (now 30)".
      checkpoint_dir: where the run's checkpoints are.
    """

    remedy: str
    checkpoint_dir: str


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    leaves = [
        jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
        if jnp.issubdtype(x.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


class DivergenceGuard:
    """Watches the loss and the state of a training run; see the module docstring.

    Args:
      advice: what the stop message suggests.
      last_checkpoint: the newest checkpoint step already saved (a resumed run's), or None.
    """

    def __init__(self, advice: DivergenceAdvice, last_checkpoint: int | None = None) -> None:
        self.advice = advice
        self.last_checkpoint = last_checkpoint
        self._pending: list[tuple[int, jax.Array]] = []
        self._last_finite: tuple[int, float] | None = None

    def record(self, step: int, loss: jax.Array) -> None:
        """Keeps the loss of training step `step` (1-based: steps done) without reading it."""
        self._pending.append((step, loss))

    def losses(self) -> float | None:
        """Reads the losses recorded since the last look; returns the newest (None if none).

        Raises:
          DivergedError: at the first step whose loss is not finite.
        """
        if not self._pending:
            return None
        steps = [step for step, _ in self._pending]
        values = [float(v) for v in jax.device_get([loss for _, loss in self._pending])]
        self._pending.clear()
        for step, value in zip(steps, values, strict=True):
            if not math.isfinite(value):
                raise DivergedError(self._message(step, f"loss {value}"))
            self._last_finite = (step, value)
        return values[-1]

    def check_state(self, step: int, state: Any) -> None:
        """Before saving step `step`: the recorded losses and every value of `state` are finite.

        Raises:
          DivergedError: if a loss since the last look or a value of `state` is not finite.
        """
        self.losses()
        if not bool(np.asarray(jax.device_get(_all_finite(state)))):
            raise DivergedError(self._message(step, "its update left non-finite parameters or optimizer state"))

    def saved(self, step: int) -> None:
        """Notes that checkpoint `step` was written (after `check_state`)."""
        self.last_checkpoint = step

    def _message(self, step: int, what: str) -> str:
        if self._last_finite is None:
            last = "no finite loss seen in this run"
        else:
            last = f"last finite loss {self._last_finite[1]:.4f} at step {self._last_finite[0]}"
        if self.last_checkpoint is None:
            resume = "then start over (no checkpoint was saved)"
        else:
            resume = (
                f"then resume from the checkpoint at step {self.last_checkpoint} in "
                f"{self.advice.checkpoint_dir} (rerun with the changed flags)"
            )
        return f"training diverged at step {step}: {what} ({last}); {self.advice.remedy}; {resume}"

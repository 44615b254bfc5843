"""Preemption: a SIGTERM makes every process stop at the same step, checkpoint it, and exit 0.

A TPU VM about to be preempted gets SIGTERM. In a multi-process run JAX's preemption sync manager
(started by `jax.distributed.initialize`) catches it on whichever host got it, tells the others
through the coordination service, and picks the first step every process can still reach;
`reached(step)` is True at that step on every process. A single-process run has no coordination
service; there a SIGTERM handler sets a flag and the next step is the one.
"""

from __future__ import annotations

import signal
from types import FrameType

from absl import logging


class PreemptionNotice:
    """Asks at every step whether to checkpoint and stop (call `reached` at every step)."""

    def __init__(self) -> None:
        from jax._src import distributed as jax_distributed

        state = jax_distributed.global_state
        self._synced = state.client is not None and state.preemption_sync_manager is not None
        self._signalled = False
        if not self._synced:
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        logging.warning("SIGTERM: checkpointing at the next step, then exiting")
        self._signalled = True

    def reached(self, step: int) -> bool:
        """True at the step where every process checkpoints and stops (collectively agreed)."""
        if self._synced:
            from jax.experimental import multihost_utils

            return bool(multihost_utils.reached_preemption_sync_point(step))
        return self._signalled

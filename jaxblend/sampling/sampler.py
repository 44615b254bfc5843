"""A Grain sampler over global steps: record i of this host's stream is global step start + i.

Grain sees one record per global batch (the host's rows of that batch, assembled by a batch
source): per-sample records would put Python on the hot path. Because records are steps, resuming
is stateless: a new sampler starting at the saved step continues the stream on any topology.
"""

from __future__ import annotations

import grain

from jaxblend.validation import require_int


class StepSampler:
    """Grain `Sampler` yielding the global steps `start_step, start_step + 1, ..., num_steps - 1`.

    Args:
      num_steps: total number of global steps of the stream (exclusive end).
      start_step: the first step to produce (resume point).
    """

    def __init__(self, num_steps: int, start_step: int = 0):
        require_int("num_steps", num_steps, 0)
        if not 0 <= start_step <= num_steps:
            raise ValueError(f"start_step must be in [0, {num_steps}], got {start_step}")
        self._num_steps = num_steps
        self._start_step = start_step

    def __len__(self) -> int:
        return self._num_steps - self._start_step

    def __repr__(self) -> str:
        return f"StepSampler(num_steps={self._num_steps}, start_step={self._start_step})"

    def __getitem__(self, index: int) -> grain.RecordMetadata:
        if not 0 <= index < len(self):
            raise IndexError(f"sampler index {index} out of range [0, {len(self)})")
        return grain.RecordMetadata(index=index, record_key=self._start_step + index)

"""Megatron-LM's batch-size ramp-up (`--rampup-batch-size START INCREMENT RAMP_SAMPLES`).

Megatron's training loop keeps `consumed_samples` (0 at the start). Before each step it sets the
global batch size from it: the full `global_batch_size` once `consumed_samples > RAMP_SAMPLES`,
else `START + int(consumed_samples / (RAMP_SAMPLES / n)) * INCREMENT` with
`n = (global_batch_size - START) / INCREMENT` increments. With `decrease_batch_size_if_needed` the
size is rounded down to a multiple of `micro_batch_size x data_parallel_size`; without it every
size must be such a multiple. The step then consumes that many samples, in order: step k holds
samples `[consumed_k, consumed_k + B_k)`. See docs/megatron_migration.md, "Batch-size ramp-up".

The plan stores the steps as a few segments of equal batch size (one per ramp increment, then
the constant tail; `jaxblend.sampling.step_plan.SegmentedStepPlan`), so a plan of millions of
steps costs a few arrays of ramp-increment length.
"""

from __future__ import annotations

import dataclasses
import math

from jaxblend import identity
from jaxblend.sampling.step_plan import SegmentedStepPlan
from jaxblend.validation import require_int

FLAG = "--rampup_batch_size"


@dataclasses.dataclass(frozen=True)
class Rampup:
    """The three numbers of `--rampup-batch-size`.

    Attributes:
      start: global batch size of the first step.
      increment: batch-size step of the ramp.
      ramp_samples: samples over which the batch size grows to the full global batch size.
    """

    start: int
    increment: int
    ramp_samples: int

    def __post_init__(self):
        for name in ("start", "increment", "ramp_samples"):
            require_int(f"Rampup.{name}", getattr(self, name), 1)

    @classmethod
    def parse(cls, text: str) -> Rampup:
        """Parses `"START INCREMENT RAMP_SAMPLES"` (spaces or commas between the numbers).

        Raises:
          ValueError: one line naming `--rampup_batch_size` and the value.
        """
        parts = text.replace(",", " ").split()
        try:
            values = [int(p) for p in parts]
        except ValueError:
            values = []
        if len(values) != 3 or min(values) < 1:
            raise ValueError(
                f"{FLAG}={text!r}: expected three positive integers START INCREMENT RAMP_SAMPLES "
                "(as Megatron-LM's --rampup-batch-size), e.g. '32 32 1000000'"
            )
        return cls(*values)

    def __str__(self) -> str:
        return f"{self.start} {self.increment} {self.ramp_samples}"


@dataclasses.dataclass(frozen=True)
class RampupStepPlan(SegmentedStepPlan):
    """Global batches growing from `rampup.start` to `global_batch_size`, in Megatron's order.

    Attributes:
      rampup: the ramp (`Rampup.parse("32 32 1000000")`).
      global_batch_size: the batch size after the ramp.
      num_steps: steps in the plan.
      micro_batch_size: Megatron's micro batch size (only the product with
        `data_parallel_size` matters).
      data_parallel_size: Megatron's data-parallel size.
      decrease_batch_size_if_needed: round every size down to a multiple of
        `micro_batch_size x data_parallel_size` (Megatron's flag of that name); if False, every
        size must already be one.
    """

    rampup: Rampup
    global_batch_size: int
    num_steps: int
    micro_batch_size: int = 1
    data_parallel_size: int = 1
    decrease_batch_size_if_needed: bool = False
    _segments: tuple = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        owner = "RampupStepPlan"
        for name, low in (("global_batch_size", 1), ("num_steps", 0), ("micro_batch_size", 1),
                          ("data_parallel_size", 1)):
            require_int(f"{owner}.{name}", getattr(self, name), low)
        r, gbs = self.rampup, self.global_batch_size
        if r.start >= gbs or (gbs - r.start) % r.increment:
            raise ValueError(
                f"{FLAG}='{r}': START must be below --global_batch_size={gbs} and "
                f"global_batch_size - START = {gbs - r.start} a multiple of INCREMENT"
            )
        self._set_segments(self._runs())

    @property
    def _unit(self) -> int:
        return self.micro_batch_size * self.data_parallel_size

    def _megatron_size(self, consumed: int, per_increment: float) -> int:
        """The calculator's current global batch size after `consumed` samples (exact arithmetic)."""
        if consumed > self.rampup.ramp_samples:
            return self.global_batch_size
        return self.rampup.start + int(consumed / per_increment) * self.rampup.increment

    def _running(self, size: int) -> int:
        """The size a step consumes: rounded down with `decrease_batch_size_if_needed`."""
        if size % self._unit == 0:
            return size
        if not self.decrease_batch_size_if_needed:
            raise ValueError(
                f"{FLAG}='{self.rampup}': batch size {size} of the ramp is not a multiple of "
                f"micro_batch_size x data_parallel_size = {self._unit}; choose START and INCREMENT "
                "multiples of it, or decrease_batch_size_if_needed"
            )
        running = size // self._unit * self._unit
        if running == 0:
            raise ValueError(
                f"{FLAG}='{self.rampup}': batch size {size} rounds down to 0 rows "
                f"(micro_batch_size x data_parallel_size = {self._unit})"
            )
        return running

    def _runs(self) -> list[tuple[int, int, int]]:
        """(first step, first sample, batch size) of each run of equal-sized steps."""
        r = self.rampup
        per_increment = r.ramp_samples / ((self.global_batch_size - r.start) // r.increment)
        runs = []
        step = consumed = 0
        while (size := self._megatron_size(consumed, per_increment)) != self.global_batch_size:
            running = self._running(size)
            # The first sample count at which the size changes: estimated, then made exact (the
            # size only grows with the count).
            level = int(consumed / per_increment)
            edge = min(r.ramp_samples + 1, math.ceil((level + 1) * per_increment))
            edge = max(edge, consumed + 1)
            while edge - 1 > consumed and self._megatron_size(edge - 1, per_increment) != size:
                edge -= 1
            while self._megatron_size(edge, per_increment) == size:
                edge += 1
            count = -(-(edge - consumed) // running)
            runs.append((step, consumed, running))
            step += count
            consumed += count * running
        runs.append((step, consumed, self._running(size)))
        return runs

    @classmethod
    def covering(
        cls, num_samples: int, rampup: Rampup, global_batch_size: int,
        num_steps: int | None = None, **options,
    ) -> RampupStepPlan:
        """The plan over a source of `num_samples` samples: `num_steps` steps or all that fit.

        Args:
          num_samples: samples of the source.
          rampup: the ramp.
          global_batch_size: the size after the ramp.
          num_steps: steps wanted (None: every full step the samples allow).
          **options: `micro_batch_size`, `data_parallel_size`, `decrease_batch_size_if_needed`.

        Raises:
          ValueError: if `num_steps` steps need more samples than there are.
        """
        unbounded = cls(rampup, global_batch_size, 0, **options)
        return unbounded._covering(num_samples, num_steps, f" with {FLAG}='{rampup}'")

    @property
    def ramp_steps(self) -> int:
        """Steps before the batch size reaches `global_batch_size`."""
        return int(self._segments[0][-1])

    @property
    def fingerprint(self) -> str:
        return identity.fingerprint(
            "rampup_step_plan", 1,
            start=self.rampup.start, increment=self.rampup.increment,
            ramp_samples=self.rampup.ramp_samples, global_batch_size=self.global_batch_size,
            # batch sizes round down to this unit only when decreasing is allowed
            round_to=self._unit if self.decrease_batch_size_if_needed else identity.OMIT,
        )

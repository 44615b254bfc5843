"""One process's share of a step plan: its rows of every batch it will load, from the sharding."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from jaxblend.sampling.sharding import batch_rows_for_process
from jaxblend.sampling.step_plan import StepPlan, check_from_step

if TYPE_CHECKING:
    from jax.sharding import Sharding


@dataclasses.dataclass(frozen=True)
class ProcessRows:
    """The rows and sample ids one process loads at each step of a plan from `from_step` on
    (picklable).

    Build with `ProcessRows.of`. The rows of each batch size are computed once, for every shape
    of the steps `[from_step, num_steps)` (`plan.batch_shapes(from_step)`), so the per-step answer
    is a lookup. Steps before `from_step` are not covered: a run that resumes at step k on another
    mesh only needs the batch sizes from k on to split over it, not those it trained before.

    Attributes:
      plan: the step plan.
      process_index: the process this share belongs to.
      rows_by_size: `{global batch size: this process's sorted int64 rows}`.
      from_step: the first step covered.
    """

    plan: StepPlan
    process_index: int
    rows_by_size: Mapping[int, np.ndarray]
    from_step: int = 0

    @classmethod
    def of(
        cls, plan: StepPlan, sharding: Sharding, process_index: int, from_step: int = 0
    ) -> ProcessRows:
        """This process's share of `plan`'s steps `[from_step, num_steps)` under the batch
        `sharding` (dimension 0 = rows).

        Raises:
          IndexError: if `from_step` is not in [0, plan.num_steps].
          ValueError: if a batch size of those steps does not split evenly over the sharding.
        """
        from_step = check_from_step(from_step, plan.num_steps)
        rows = {}
        for size in sorted({shape.rows for shape in plan.batch_shapes(from_step)}):
            try:
                rows[size] = batch_rows_for_process(size, sharding, process_index)
            except ValueError as err:
                after = f" at or after step {from_step}" if from_step else ""
                raise ValueError(
                    f"the step plan has batches of {size} rows{after}, which the mesh's batch axes "
                    f"cannot split evenly ({err}); every batch size the run still takes must be a "
                    "multiple of the data-shard count (token-budget plans: set "
                    "TokenBudgetConfig.row_multiple to a multiple of it)"
                ) from err
        return cls(plan, process_index, rows, from_step)

    def rows(self, step: int) -> np.ndarray:
        """This process's rows of global batch `step` (sorted; empty if it holds none).

        Raises:
          IndexError: if `step` is before `from_step` or not a step of the plan.
        """
        if step < self.from_step:
            raise IndexError(
                f"step {step} is before step {self.from_step}, the first step this process's rows "
                f"were computed for; build them with ProcessRows.of(..., from_step={step}) or earlier"
            )
        return self.rows_by_size[self.plan.batch_size(step)]

    def sample_ids(self, step: int) -> np.ndarray:
        """Global sample ids of this process's rows of `step` (-1: padding row), in row order."""
        return self.plan.sample_ids(step)[self.rows(step)]

"""One process's share of a step plan: its rows of every batch, from the batch sharding."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from jaxblend.sampling.sharding import batch_rows_for_process
from jaxblend.sampling.step_plan import StepPlan

if TYPE_CHECKING:
    from jax.sharding import Sharding


@dataclasses.dataclass(frozen=True)
class ProcessRows:
    """The rows and sample ids one process loads at each step of a plan (picklable).

    Build with `ProcessRows.of`. The rows of each batch size are computed once, for every shape
    the plan can produce, so the per-step answer is a lookup.

    Attributes:
      plan: the step plan.
      process_index: the process this share belongs to.
      rows_by_size: `{global batch size: this process's sorted int64 rows}`.
    """

    plan: StepPlan
    process_index: int
    rows_by_size: Mapping[int, np.ndarray]

    @classmethod
    def of(cls, plan: StepPlan, sharding: Sharding, process_index: int) -> ProcessRows:
        """This process's share of `plan` under the batch `sharding` (dimension 0 = rows).

        Raises:
          ValueError: if a batch size of the plan does not split evenly over the sharding.
        """
        rows = {}
        for size in sorted({shape.rows for shape in plan.batch_shapes()}):
            try:
                rows[size] = batch_rows_for_process(size, sharding, process_index)
            except ValueError as err:
                raise ValueError(
                    f"the step plan has batches of {size} rows, which the mesh's batch axes "
                    f"cannot split evenly ({err}); every batch size must be a multiple of the "
                    "data-shard count (token-budget plans: set TokenBudgetConfig.row_multiple to a "
                    "multiple of it)"
                ) from err
        return cls(plan, process_index, rows)

    def rows(self, step: int) -> np.ndarray:
        """This process's rows of global batch `step` (sorted; empty if it holds none)."""
        return self.rows_by_size[self.plan.batch_size(step)]

    def sample_ids(self, step: int) -> np.ndarray:
        """Global sample ids of this process's rows of `step` (-1: padding row), in row order."""
        return self.plan.sample_ids(step)[self.rows(step)]

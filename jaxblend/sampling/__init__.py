"""Sampling: which global samples make step k, and which of them each JAX process loads.

A step plan (`StepPlan`: `FixedStepPlan`, `RampupStepPlan`, `TokenBudgetPlan`) maps a step to the
global sample ids of its rows and says every batch shape up front; `ProcessRows` gives one
process its rows of each step from the batch sharding; `StepSampler` is the Grain sampler over
steps. Everything here is pure: the same answers on every host, for any topology, before and after
a resume (docs/design.md, "Global batch k").
"""

from jaxblend.sampling.process_rows import ProcessRows
from jaxblend.sampling.rampup import Rampup, RampupStepPlan
from jaxblend.sampling.sampler import StepSampler
from jaxblend.sampling.sharding import batch_rows_for_process, rows_by_process
from jaxblend.sampling.step_plan import BatchShape, FixedStepPlan, StepPlan
from jaxblend.sampling.token_budget_config import TokenBudgetConfig
from jaxblend.sampling.token_budget_plan import TokenBudgetPlan
from jaxblend.sampling.token_budget_planning import plan_token_budget
from jaxblend.sampling.token_budget_store import load_token_budget_plan, save_token_budget_plan

__all__ = [
    "BatchShape",
    "FixedStepPlan",
    "ProcessRows",
    "Rampup",
    "RampupStepPlan",
    "StepPlan",
    "StepSampler",
    "TokenBudgetConfig",
    "TokenBudgetPlan",
    "batch_rows_for_process",
    "load_token_budget_plan",
    "plan_token_budget",
    "rows_by_process",
    "save_token_budget_plan",
]

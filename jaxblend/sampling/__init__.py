"""Sampling: which global samples make step k, and which of them each JAX process loads.

A step plan (`StepPlan`: `FixedStepPlan`, `RampupStepPlan`, `StepBatchSchedulePlan`,
`TokenBudgetPlan`) maps a step to the global sample ids of its rows and says every batch shape up
front; a `DataSchedule` (stages of `DataStage`) changes the data mixture at given steps;
`ProcessRows` gives one process its rows of each step from the batch sharding;
`StepSampler` is the Grain sampler over steps. Everything here is pure: the same answers on
every host, for any topology, before and after a resume (docs/design.md, "Global batch k").
"""

from __future__ import annotations

from jaxblend import _lazy

_NAMES = {
    "DataSchedule": "jaxblend.sampling.data_schedule",
    "DataStage": "jaxblend.sampling.data_schedule",
    "PhaseStepPlan": "jaxblend.sampling.phases",
    "PhaseTransitions": "jaxblend.sampling.phases",
    "ProcessRows": "jaxblend.sampling.process_rows",
    "Rampup": "jaxblend.sampling.rampup",
    "RampupStepPlan": "jaxblend.sampling.rampup",
    "StepSampler": "jaxblend.sampling.sampler",
    "StepBatchSchedule": "jaxblend.sampling.step_batch_schedule",
    "StepBatchSchedulePlan": "jaxblend.sampling.step_batch_schedule",
    "batch_rows_for_process": "jaxblend.sampling.sharding",
    "rows_by_process": "jaxblend.sampling.sharding",
    "BatchShape": "jaxblend.sampling.step_plan",
    "FixedStepPlan": "jaxblend.sampling.step_plan",
    "StepPlan": "jaxblend.sampling.step_plan",
    "TokenBudgetConfig": "jaxblend.sampling.token_budget_config",
    "TokenBudgetPlan": "jaxblend.sampling.token_budget_plan",
    "plan_token_budget": "jaxblend.sampling.token_budget_planning",
    "load_token_budget_plan": "jaxblend.sampling.token_budget_store",
    "save_token_budget_plan": "jaxblend.sampling.token_budget_store",
}

__all__ = [
    "BatchShape",
    "DataSchedule",
    "DataStage",
    "FixedStepPlan",
    "PhaseStepPlan",
    "PhaseTransitions",
    "ProcessRows",
    "Rampup",
    "RampupStepPlan",
    "StepBatchSchedule",
    "StepBatchSchedulePlan",
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


# Names resolve on first use (the Grain sampler loads Grain; the plans do not).
__getattr__, __dir__ = _lazy.exports(__name__, _NAMES)

"""Sampling: which global samples make step k, and which of them each JAX process loads.

A step plan (`StepPlan`: `FixedStepPlan`, `RampupStepPlan`, `BucketPlan`) maps a step to the
global sample ids of its rows and says every batch shape up front; `ProcessPlan` gives one
process its rows of each step from the batch sharding; `StepSampler` is the Grain sampler over
steps. Everything here is pure: the same answers on every host, for any topology, before and after
a resume (docs/design.md, "Global batch k").
"""

from jaxblend.sampling.bucket_config import BucketConfig
from jaxblend.sampling.bucket_plan import BucketPlan
from jaxblend.sampling.bucket_planning import plan_buckets
from jaxblend.sampling.bucket_store import load_bucket_plan, save_bucket_plan
from jaxblend.sampling.plan import BatchShape, FixedStepPlan, StepPlan
from jaxblend.sampling.process_plan import ProcessPlan
from jaxblend.sampling.rampup import Rampup, RampupStepPlan
from jaxblend.sampling.sampler import StepSampler
from jaxblend.sampling.sharding import batch_rows_for_process, rows_by_process

__all__ = [
    "BatchShape",
    "BucketConfig",
    "BucketPlan",
    "FixedStepPlan",
    "ProcessPlan",
    "Rampup",
    "RampupStepPlan",
    "StepPlan",
    "StepSampler",
    "batch_rows_for_process",
    "load_bucket_plan",
    "plan_buckets",
    "rows_by_process",
    "save_bucket_plan",
]

"""Sampling: which global sample ids each JAX process loads at each step.

The global order of a split is fixed by the index maps; global batch k is samples
`[k * B, (k + 1) * B)` of it. This package turns a batch sharding and a process index into the
rows of that batch the process must load, and wraps that in a Grain sampler.
"""

from jaxblend.sampling.sampler import StepSampler
from jaxblend.sampling.sharding import (
    batch_rows_for_process,
    process_sample_ids,
    rows_by_process,
)

__all__ = [
    "StepSampler",
    "batch_rows_for_process",
    "process_sample_ids",
    "rows_by_process",
]

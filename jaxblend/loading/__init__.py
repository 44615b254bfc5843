"""Loading: host-sharded Grain loading of global `jax.Array` batches.

A loader's resume state goes into any Orbax checkpoint as one more item with
`jaxblend.loading.checkpointing` (`LoaderStateSave.of(loader)` / `LoaderStateRestore()`; needs the
`orbax` extra, so it is imported from there, not from here).
"""

from jaxblend.loading.bucketing import (
    BucketConfig,
    BucketedLoader,
    BucketPlan,
    make_bucketed_loader,
    plan_buckets,
)
from jaxblend.loading.global_batch import batch_sharding, make_global_batch
from jaxblend.loading.loader import (
    GlobalBatchLoader,
    HostBatchSource,
    LoaderConfig,
    PrefetchOptions,
    StepLoader,
    make_loader,
)

__all__ = [
    "BucketConfig",
    "BucketPlan",
    "BucketedLoader",
    "GlobalBatchLoader",
    "HostBatchSource",
    "LoaderConfig",
    "PrefetchOptions",
    "StepLoader",
    "batch_sharding",
    "make_bucketed_loader",
    "make_global_batch",
    "make_loader",
    "plan_buckets",
]

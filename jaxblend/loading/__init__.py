"""Loading: host-sharded Grain loading of global `jax.Array` batches."""

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

"""Loading: host-sharded Grain loading of global `jax.Array` batches."""

from jaxblend.loading.global_batch import batch_sharding, make_global_batch
from jaxblend.loading.loader import GlobalBatchLoader, HostBatchSource, LoaderConfig, make_loader

__all__ = [
    "GlobalBatchLoader",
    "HostBatchSource",
    "LoaderConfig",
    "batch_sharding",
    "make_global_batch",
    "make_loader",
]

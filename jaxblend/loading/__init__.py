"""Loading: host-sharded Grain loading of global `jax.Array` batches, for any step plan.

A loader's resume state goes into any Orbax checkpoint as one more item with
`jaxblend.loading.checkpointing` (`LoaderStateSave.of(loader)` / `LoaderStateRestore()`; needs the
`orbax` extra, so it is imported from there, not from here).
"""

from jaxblend.loading.global_batch import batch_sharding, make_global_batch
from jaxblend.loading.host_source import HostStepSource
from jaxblend.loading.loader import PrefetchOptions, StepLoader, make_loader
from jaxblend.loading.protocols import GrainSourceAdapter, LoaderSource, PaddedLoaderSource
from jaxblend.loading.resume_history import StagedHistory

__all__ = [
    "GrainSourceAdapter",
    "HostStepSource",
    "LoaderSource",
    "PaddedLoaderSource",
    "PrefetchOptions",
    "StagedHistory",
    "StepLoader",
    "batch_sharding",
    "make_global_batch",
    "make_loader",
]

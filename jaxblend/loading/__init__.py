"""Loading: host-sharded Grain loading of global `jax.Array` batches, for any step plan.

A loader's resume state goes into any Orbax checkpoint as one more item with
`jaxblend.loading.checkpointing` (`LoaderStateSave.of(loader)` / `LoaderStateRestore()`; needs the
`orbax` extra, so it is imported from there, not from here). What a loader did is
`StepLoader.metrics()` (a `LoaderMetrics`), served to Prometheus by `serve_metrics`
(docs/telemetry.md).
"""

from jaxblend.loading.global_batch import batch_sharding, make_global_batch
from jaxblend.loading.host_source import HostStepSource
from jaxblend.loading.loader import PrefetchOptions, StepLoader, make_loader
from jaxblend.loading.prometheus import MetricsServer, serve_metrics
from jaxblend.loading.protocols import GrainSourceAdapter, LoaderSource, PaddedLoaderSource
from jaxblend.loading.resume_history import StagedHistory
from jaxblend.loading.telemetry import LoaderMetrics, StoreMetrics, TelemetryOptions

__all__ = [
    "GrainSourceAdapter",
    "HostStepSource",
    "LoaderMetrics",
    "LoaderSource",
    "MetricsServer",
    "PaddedLoaderSource",
    "PrefetchOptions",
    "StagedHistory",
    "StepLoader",
    "StoreMetrics",
    "TelemetryOptions",
    "batch_sharding",
    "make_global_batch",
    "make_loader",
    "serve_metrics",
]

"""Loader flags (Grain workers, reads in flight, adaptive read-ahead; stall reports, the
Prometheus endpoint) and their `jaxblend.loading.PrefetchOptions` and `TelemetryOptions`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from absl import flags

from jaxblend.cli import flag_help

if TYPE_CHECKING:  # the loading layer imports JAX, which must wait for the flags
    from jaxblend.loading import TelemetryOptions


def define_loader_flags() -> None:
    """Defines `--worker_count`, `--read_ahead`, `--adaptive_read_ahead` and
    `--read_ahead_memory_mb`."""
    with flag_help.group(flag_help.PROCESSES):
        flags.DEFINE_integer(
            "worker_count", 0, "Grain worker processes (0: read in this process's threads).",
            lower_bound=0,
        )
        flags.DEFINE_integer(
            "read_ahead", 0, "Steps read concurrently ahead of use (0: 8 from a bucket, else 1).",
            lower_bound=0,
        )
        flags.DEFINE_bool(
            "adaptive_read_ahead", None,
            "Grow the steps read ahead while the loop waits for data and shrink them while it "
            "does not, within --read_ahead_memory_mb (reads in threads only). Default (unset): on for "
            "data in a bucket, off for local files; --adaptive_read_ahead / "
            "--noadaptive_read_ahead force it on / off.",
        )
        flags.DEFINE_integer(
            "read_ahead_memory_mb", 1024,
            "Memory the steps read ahead may hold when the read-ahead adapts, MB.", lower_bound=1,
        )


def prefetch_from_flags():
    """The `jaxblend.loading.PrefetchOptions` of the flags."""
    from jaxblend.loading import PrefetchOptions

    fl = flags.FLAGS
    return PrefetchOptions(
        worker_count=fl.worker_count, read_ahead=fl.read_ahead,
        adaptive_read_ahead=fl.adaptive_read_ahead,
        read_ahead_memory=fl.read_ahead_memory_mb << 20,
    )


def define_telemetry_flags() -> None:
    """Defines `--stall_threshold`, `--metrics_port` and `--metrics_address`."""
    with flag_help.group(flag_help.RUN):
        flags.DEFINE_float(
            "stall_threshold", 10.0,
            "Seconds the training loop may wait for a batch before one line names the reads still "
            "pending (repeated every as many seconds while it waits; 0: never).",
            lower_bound=0.0,
        )
        flags.DEFINE_integer(
            "metrics_port", 0,
            "Serve this host's loader figures to Prometheus on this port (/metrics; 0: no endpoint).",
            lower_bound=0, upper_bound=65535,
        )
        flags.DEFINE_string(
            "metrics_address", "127.0.0.1",
            "Address the --metrics_port endpoint binds (0.0.0.0 opens it to the network).",
        )


def telemetry_from_flags() -> TelemetryOptions:
    """The loader's `jaxblend.loading.TelemetryOptions` of the flags (`--metrics_port` and
    `--metrics_address` are the training example's to serve)."""
    from jaxblend.loading import TelemetryOptions

    return TelemetryOptions(stall_threshold=flags.FLAGS.stall_threshold)

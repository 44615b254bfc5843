"""Loader telemetry flags (stall reports, the Prometheus endpoint) and their settings."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from absl import flags

from jaxblend.cli import flag_help

if TYPE_CHECKING:  # the loading layer imports JAX, which must wait for the flags
    from jaxblend.loading import TelemetryOptions


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


@dataclasses.dataclass(frozen=True)
class TelemetrySettings:
    """The telemetry flags' values.

    Attributes:
      options: the loader's `jaxblend.loading.TelemetryOptions`.
      metrics_port: the Prometheus endpoint's port (0: none).
      metrics_address: the address it binds.
    """

    options: TelemetryOptions
    metrics_port: int
    metrics_address: str


def telemetry_from_flags() -> TelemetrySettings:
    """The `TelemetrySettings` of the flags."""
    from jaxblend.loading import TelemetryOptions

    fl = flags.FLAGS
    return TelemetrySettings(
        options=TelemetryOptions(stall_threshold=fl.stall_threshold),
        metrics_port=fl.metrics_port,
        metrics_address=fl.metrics_address,
    )

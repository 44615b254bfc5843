"""Multi-process JAX set-up: `jax.distributed.initialize` from a `DistributedConfig`.

A run names its coordinator, process count and process index (all three, or the coordinator and
count with the index left to JAX), or none of them: on a TPU pod JAX then detects the cluster
itself, and a single host stays a single process. `jaxblend.cli` builds the config from
`--coordinator_address`, `--num_processes` and `--process_id`.
"""

from __future__ import annotations

import dataclasses
import os

from absl import logging

from jaxblend.validation import require_positive


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    """How this process joins a multi-process run.

    Attributes:
      coordinator_address: host:port of process 0's coordinator (None: single process or
        detected by JAX).
      num_processes: processes in the run.
      process_id: this process's index in [0, num_processes) (None with a coordinator: JAX
        detects it).
      timeout_seconds: how long to wait for every process to join (and the heartbeat timeout).
      num_cpu_devices: force this many CPU devices in this process (multi-device meshes without
        accelerators); applies only before JAX starts its backends.
    """

    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    timeout_seconds: int = 300
    num_cpu_devices: int | None = None

    def __post_init__(self) -> None:
        given = {
            "coordinator_address": self.coordinator_address,
            "num_processes": self.num_processes,
            "process_id": self.process_id,
        }
        if any(v is not None for v in given.values()):
            missing = [k for k, v in given.items() if v is None]
            if missing and not (self.coordinator_address and missing == ["process_id"]):
                raise ValueError(
                    f"--coordinator_address, --num_processes and --process_id go together; "
                    f"missing {missing}"
                )
        require_positive("--distributed_timeout", self.timeout_seconds)
        if self.num_cpu_devices is not None and self.num_cpu_devices < 1:
            raise ValueError(f"--num_cpu_devices must be >= 1, got {self.num_cpu_devices}")

    @property
    def multi_process(self) -> bool:
        """Whether the config names a multi-process run to join."""
        return self.coordinator_address is not None or self.num_processes is not None


def setup(config: DistributedConfig) -> None:
    """Forces the CPU device count (if asked) and joins the run described by `config`."""
    if config.num_cpu_devices:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={config.num_cpu_devices}"
        ).strip()
    if config.multi_process:
        initialize(
            config.coordinator_address, config.num_processes, config.process_id,
            config.timeout_seconds,
        )


def initialize(
    coordinator_address: str | None,
    num_processes: int | None,
    process_id: int | None,
    timeout_seconds: int = 300,
) -> None:
    """Calls `jax.distributed.initialize` (idempotent per process)."""
    import jax  # deferred: XLA_FLAGS may be set just before

    if num_processes == 1 and process_id in (0, None):
        logging.info("single-process run: jax.distributed not initialized")
        return
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout_seconds,
        heartbeat_timeout_seconds=max(10, timeout_seconds),
    )
    logging.info(
        "jax.distributed: process %d of %d, %d local / %d global devices",
        jax.process_index(), jax.process_count(), jax.local_device_count(), jax.device_count(),
    )

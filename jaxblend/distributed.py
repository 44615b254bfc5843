"""Multi-process JAX set-up shared by every jaxblend CLI.

Every JAX command line accepts `--coordinator_address`, `--num_processes` and `--process_id` and
calls `jax.distributed.initialize` with them when given. On a TPU pod they may all be omitted:
`--distributed=auto` (the default) then lets JAX detect the cluster, and a single host stays a
single process.
"""

from __future__ import annotations

import os

from absl import flags, logging

from jaxblend.define_once import define_once


@define_once("coordinator_address")
def define_distributed_flags() -> None:
    """Defines the distributed flags once (safe to call from several modules)."""
    flags.DEFINE_string(
        "coordinator_address", None, "host:port of process 0's coordinator (multi-process runs)."
    )
    flags.DEFINE_integer("num_processes", None, "Number of JAX processes in the run.")
    flags.DEFINE_integer("process_id", None, "This process's index in [0, num_processes).")
    flags.DEFINE_integer(
        "distributed_timeout", 300, "Seconds to wait for all processes to join (and heartbeat)."
    )
    flags.DEFINE_integer(
        "num_cpu_devices", None,
        "Force this many CPU devices in this process (testing multi-device meshes without "
        "accelerators); must be set before JAX starts.",
    )


def initialize_from_flags() -> None:
    """Initializes JAX (CPU device count, jax.distributed) from the flags.

    Raises:
      ValueError: if only some of the three distributed flags are given.
    """
    fl = flags.FLAGS
    if fl.num_cpu_devices:
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={fl.num_cpu_devices}"
        ).strip()
    given = {
        "coordinator_address": fl.coordinator_address,
        "num_processes": fl.num_processes,
        "process_id": fl.process_id,
    }
    if any(v is not None for v in given.values()):
        missing = [k for k, v in given.items() if v is None]
        if missing and not (fl.coordinator_address and missing == ["process_id"]):
            raise ValueError(
                f"--coordinator_address, --num_processes and --process_id go together; "
                f"missing {missing}"
            )
        initialize(fl.coordinator_address, fl.num_processes, fl.process_id, fl.distributed_timeout)


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

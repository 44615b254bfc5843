"""Multi-process flags of every JAX command line and their `jaxblend.distributed.DistributedConfig`.

`--coordinator_address`, `--num_processes` and `--process_id` are given together (or all omitted:
on a TPU pod JAX detects the cluster); `--num_cpu_devices` fakes a multi-device host on CPU.
"""

from __future__ import annotations

from absl import flags

from jaxblend import distributed
from jaxblend.cli import flag_help


def define_distributed_flags() -> None:
    """Defines the distributed flags."""
    with flag_help.group(flag_help.PROCESSES):
        flags.DEFINE_string(
            "coordinator_address", None,
            "host:port of process 0's coordinator (multi-process runs; default: none, one process, "
            "or detected by JAX on a TPU pod).",
        )
        flags.DEFINE_integer(
            "num_processes", None,
            "Number of JAX processes in the run (default: detected by JAX; 1 on a single host).",
        )
        flags.DEFINE_integer(
            "process_id", None,
            "This process's index in [0, num_processes) (default: detected by JAX).",
        )
        flags.DEFINE_integer(
            "distributed_timeout", 300, "Seconds to wait for all processes to join (and heartbeat).",
            lower_bound=1,
        )
        flags.DEFINE_integer(
            "num_cpu_devices", None,
            "Force this many CPU devices in this process (testing multi-device meshes without "
            "accelerators); must be set before JAX starts (default: the platform's devices).",
            lower_bound=1,
        )


def distributed_config_from_flags() -> distributed.DistributedConfig:
    """The `DistributedConfig` of the flags.

    Raises:
      ValueError: if only some of the three process flags are given.
    """
    fl = flags.FLAGS
    return distributed.DistributedConfig(
        coordinator_address=fl.coordinator_address,
        num_processes=fl.num_processes,
        process_id=fl.process_id,
        timeout_seconds=fl.distributed_timeout,
        num_cpu_devices=fl.num_cpu_devices,
    )


def initialize_from_flags() -> None:
    """Sets up JAX (CPU device count, `jax.distributed`) as the flags say."""
    distributed.setup(distributed_config_from_flags())

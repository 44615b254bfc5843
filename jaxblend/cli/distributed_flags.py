"""Multi-process and device flags of every JAX command line: their
`jaxblend.distributed.DistributedConfig`, and the `jax.sharding.Mesh` of `--mesh_shape` /
`--mesh_axes`.

`--coordinator_address`, `--num_processes` and `--process_id` are given together (or all omitted:
on a TPU pod JAX detects the cluster); `--num_cpu_devices` fakes a multi-device host on CPU.
"""

from __future__ import annotations

from absl import flags

from jaxblend import distributed
from jaxblend import mesh as mesh_lib
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


def define_mesh_flags() -> None:
    """Defines `--mesh_shape` and `--mesh_axes`."""
    with flag_help.group(flag_help.PROCESSES):
        flags.DEFINE_string(
            "mesh_shape", None,
            "Mesh shape, e.g. 8 or 4,2; one size may be -1 (default: all devices on one axis).",
        )
        flags.DEFINE_string(
            "mesh_axes", "data",
            "Mesh axis names, e.g. data or data,tensor (data and fsdp split the batch).",
        )


def mesh_from_flags():
    """The mesh of `--mesh_shape`/`--mesh_axes` over every global device (`jax.make_mesh`).

    Raises:
      ValueError: a malformed shape, or one that does not match the devices.
    """
    import jax

    fl = flags.FLAGS
    shape = fl.mesh_shape if fl.mesh_shape is not None else str(jax.device_count())
    return mesh_lib.make_mesh(shape, fl.mesh_axes)

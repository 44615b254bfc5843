"""`--mesh_shape` / `--mesh_axes` and the `jax.sharding.Mesh` they describe."""

from __future__ import annotations

from absl import flags

from jaxblend import mesh as mesh_lib
from jaxblend.cli import flag_help


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

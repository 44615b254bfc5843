"""Building a `jax.sharding.Mesh` from a shape and axis names ("4,2" and "data,tensor" too).

Meshes come from `jax.make_mesh`, which orders the devices by the hardware topology (a TPU
slice's torus, hosts' local devices kept together), with `Auto` axes: shardings are propagated
by the compiler, as with a `Mesh` built by hand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Mesh axes that split the batch dimension; any other axis (tensor, ...) replicates the batch.
BATCH_AXIS_NAMES = ("data", "fsdp")


def parse_mesh(shape: str | Sequence[int], axes: str | Sequence[str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Parses `--mesh_shape` / `--mesh_axes` values (one dimension may be -1: inferred).

    Raises:
      ValueError: if the shape is not positive integers or the lengths differ.
    """
    if isinstance(shape, str):
        try:
            shape = [int(s) for s in shape.replace("x", ",").split(",") if s.strip()]
        except ValueError as err:
            raise ValueError(f"--mesh_shape must be comma-separated integers, got {shape!r}") from err
    if isinstance(axes, str):
        axes = [a.strip() for a in axes.split(",") if a.strip()]
    shape, axes = tuple(int(s) for s in shape), tuple(axes)
    if not shape or any(s <= 0 and s != -1 for s in shape) or shape.count(-1) > 1:
        raise ValueError(f"mesh shape must be positive integers (one may be -1), got {shape}")
    if len(shape) != len(axes):
        raise ValueError(f"mesh shape {shape} and axes {axes} must have the same length")
    if len(set(axes)) != len(axes):
        raise ValueError(f"mesh axes must be distinct, got {axes}")
    return shape, axes


def make_mesh(shape: str | Sequence[int], axes: str | Sequence[str], devices=None):
    """A mesh of `shape` with axis names `axes` over `devices` (default: all global devices),
    laid out by `jax.make_mesh` (topology-aware device order).

    Args:
      shape: sizes per axis ("4,2" or (4, 2)); one may be -1 (the rest of the devices).
      axes: axis names ("data,tensor" or ("data", "tensor")).
      devices: the devices of the mesh (default: `jax.devices()`).

    Raises:
      ValueError: if the mesh size differs from the number of devices.
    """
    import jax
    from jax.sharding import AxisType

    shape, axes = parse_mesh(shape, axes)
    devices = jax.devices() if devices is None else list(devices)
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        if len(devices) % known:
            raise ValueError(f"mesh shape {shape} does not divide {len(devices)} devices")
        shape = tuple(len(devices) // known if s == -1 else s for s in shape)
    if int(np.prod(shape)) != len(devices):
        raise ValueError(
            f"mesh shape {shape} has {int(np.prod(shape))} devices but there are {len(devices)}"
        )
    return jax.make_mesh(shape, axes, axis_types=(AxisType.Auto,) * len(axes), devices=devices)


def default_batch_axes(axes: Sequence[str]) -> tuple[str, ...]:
    """The mesh axes that split the batch: `data` and `fsdp` when present."""
    return tuple(a for a in axes if a in BATCH_AXIS_NAMES)

"""Host-local numpy rows -> global `jax.Array` batches laid out on a mesh.

This is the only module of the data path that creates device arrays. Each process passes the rows
it loaded (global row ids + arrays); every addressable device receives exactly the rows its shard
covers, so data-parallel, FSDP and tensor-parallel layouts all work (replicas along a tensor axis
get the same rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def batch_sharding(mesh: Mesh, batch_axes: Sequence[str], ndim: int = 1) -> NamedSharding:
    """Sharding of an `ndim`-dimensional batch array split over `batch_axes` on dimension 0.

    Raises:
      ValueError: if an axis is not in the mesh (the error lists the mesh's axes).
    """
    missing = [a for a in batch_axes if a not in mesh.axis_names]
    if missing:
        raise ValueError(f"batch axes {missing} are not mesh axes {tuple(mesh.axis_names)}")
    lead = tuple(batch_axes) if len(batch_axes) != 1 else batch_axes[0]
    return NamedSharding(mesh, PartitionSpec(lead if batch_axes else None, *([None] * (ndim - 1))))


def make_global_batch(
    local: Mapping[str, np.ndarray],
    rows: np.ndarray,
    global_batch_size: int,
    mesh: Mesh,
    batch_axes: Sequence[str],
) -> dict[str, jax.Array]:
    """Assembles global arrays from this process's rows.

    Args:
      local: host arrays, each `[len(rows), ...]`, row j holding global row `rows[j]`.
      rows: sorted global row ids this process loaded (from `jaxblend.sampling`).
      global_batch_size: B, the global leading dimension.
      mesh: the training mesh.
      batch_axes: mesh axes dimension 0 is split over (e.g. `("data",)` or `("data", "fsdp")`).

    Returns:
      `{key: jax.Array of shape [B, ...]}` sharded over `batch_axes`.

    Raises:
      ValueError: if an array's leading dimension differs from `len(rows)`, or a device needs a
        row this process did not load; the message names the key, the shapes and the rows.
    """
    rows = np.asarray(rows, dtype=np.int64)
    out = {}
    for key, value in local.items():
        value = _device_dtype(key, np.asarray(value))
        if value.shape[:1] != (rows.size,):
            raise ValueError(
                f"batch key {key!r}: host array has shape {value.shape}, expected leading "
                f"dimension {rows.size} (rows loaded by process {jax.process_index()})"
            )
        global_shape = (global_batch_size, *value.shape[1:])
        sharding = batch_sharding(mesh, batch_axes, value.ndim)
        out[key] = jax.make_array_from_callback(
            global_shape, sharding, lambda index, v=value, k=key: _rows_for(index, v, rows, global_batch_size, k)
        )
    return out


def _rows_for(
    index: tuple[slice, ...], value: np.ndarray, rows: np.ndarray, global_batch_size: int, key: str
) -> np.ndarray:
    """The slice of `value` a device with global `index` holds."""
    first = index[0] if index else slice(None)
    wanted = np.arange(*first.indices(global_batch_size), dtype=np.int64)
    pos = np.searchsorted(rows, wanted)
    if pos.size and (pos[-1] >= rows.size or not np.array_equal(rows[pos], wanted)):
        raise ValueError(
            f"batch key {key!r}: a local device needs global rows {wanted[0]}..{wanted[-1]} but "
            f"this process loaded rows {rows[:8].tolist()}{'...' if rows.size > 8 else ''}; "
            "the loader's sharding and the array sharding disagree"
        )
    if pos.size and pos[-1] - pos[0] + 1 == pos.size:
        return value[pos[0] : pos[-1] + 1]
    return value[pos]


def _device_dtype(key: str, value: np.ndarray) -> np.ndarray:
    """Narrows 64-bit integers to int32 when JAX runs without x64, refusing silent overflow."""
    if value.dtype.itemsize == 8 and value.dtype.kind in "iu" and not jax.config.jax_enable_x64:
        info = np.iinfo(np.int32)
        if value.size and (value.max() > info.max or value.min() < info.min):
            raise ValueError(
                f"batch key {key!r} holds values in [{value.min()}, {value.max()}] that do not fit "
                "int32; "
                "enable 64-bit JAX (jax.config.update('jax_enable_x64', True))"
            )
        return value.astype(np.int32)
    return value

"""Pure host-sharding math: (batch size, batch sharding, process) -> the rows a process loads.

Nothing here asks JAX which process it runs in: the process index is an argument, so the same
function answers for every host of a pod and can be tested for any topology in one process.
Which samples fill the rows is the step plan's business (`jaxblend.sampling.step_plan`); only the split
of rows between processes depends on the mesh (docs/design.md, "Multi-host").
"""

from __future__ import annotations

import numpy as np


def rows_by_process(global_batch_size: int, sharding) -> dict[int, np.ndarray]:
    """Rows of a `[B, ...]` batch held by each process's devices under `sharding`.

    Args:
      global_batch_size: B, the leading dimension of the global batch.
      sharding: a `jax.sharding.Sharding` for the batch (any mesh: the batch axis may be split
        over data and fsdp axes and replicated over tensor axes).

    Returns:
      `{process_index: sorted unique int64 row ids}` for every process owning a device.

    Raises:
      ValueError: if `global_batch_size` is not positive or does not divide evenly over the
        sharding (the error names both).
    """
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be > 0, got {global_batch_size}")
    try:
        index_map = sharding.devices_indices_map((global_batch_size,))
    except ValueError as err:
        raise ValueError(
            f"global_batch_size={global_batch_size} cannot be laid out by {sharding}: {err}"
        ) from err
    rows: dict[int, set[int]] = {}
    for device, index in index_map.items():
        first = index[0] if index else slice(None)  # the rows; a 0-d index holds them all
        held = range(*first.indices(global_batch_size))
        rows.setdefault(device.process_index, set()).update(held)
    return {p: np.array(sorted(r), dtype=np.int64) for p, r in sorted(rows.items())}


def batch_rows_for_process(global_batch_size: int, sharding, process_index: int) -> np.ndarray:
    """Rows of every global batch that `process_index` must load (sorted, int64).

    Processes whose devices hold the same rows (e.g. replicas along a tensor axis) get the same
    rows. A process that owns no device of the sharding gets an empty array.
    """
    return rows_by_process(global_batch_size, sharding).get(
        process_index, np.zeros(0, dtype=np.int64)
    )

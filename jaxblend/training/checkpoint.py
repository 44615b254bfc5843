"""Checkpoints of the training example: parameters, optimizer state and the loader's state.

Layout: `<dir>/step_<N>/{arrays.npz, meta.json}`, written by process 0 into a temporary directory
and renamed when complete, so a crash never leaves a checkpoint that looks finished. Arrays are
stored whole (gathered from every process), so a checkpoint restores on any number of processes
and any mesh; the loader state is a step + fingerprint (topology-free). On a multi-host pod,
`<dir>` must be a filesystem every host sees (NFS, a GCS FUSE mount).

This is the simple format a small example needs; large models would use Orbax with sharded
TensorStore arrays.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

_STEP_DIR = re.compile(r"^step_(\d+)$")


def latest_step(directory: str) -> int | None:
    """The newest complete checkpoint's step in `directory`, or None."""
    if not directory or not os.path.isdir(directory):
        return None
    steps = []
    for name in os.listdir(directory):
        m = _STEP_DIR.match(name)
        if m and os.path.exists(os.path.join(directory, name, "meta.json")):
            steps.append(int(m.group(1)))
    return max(steps, default=None)


def save(directory: str, step: int, tree: Any, meta: dict[str, Any], keep: int = 2) -> None:
    """Saves `tree` (a pytree of arrays) and `meta` as checkpoint `step` (collective call)."""
    leaves = jax.tree.leaves(tree)
    host = multihost_utils.process_allgather(leaves, tiled=True)
    if jax.process_index() == 0:
        final = os.path.join(directory, f"step_{step:08d}")
        tmp = f"{final}.tmp-{os.getpid()}"
        os.makedirs(tmp, exist_ok=True)
        np.savez(os.path.join(tmp, "arrays.npz"), *[np.asarray(x) for x in host])
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump({**meta, "step": step, "num_arrays": len(host)}, f, indent=1)
        if os.path.exists(final):
            shutil.rmtree(final)
        os.replace(tmp, final)
        _prune(directory, keep)
        logging.info("saved checkpoint %s", final)
    multihost_utils.sync_global_devices(f"checkpoint {step}")


def restore(directory: str, step: int, like: Any, shardings: Any) -> tuple[Any, dict[str, Any]]:
    """Loads checkpoint `step` into arrays shaped like `like`, laid out by `shardings`.

    Raises:
      ValueError: if the checkpoint's arrays do not match `like` (names the file and leaf).
    """
    path = os.path.join(directory, f"step_{step:08d}")
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    leaves, treedef = jax.tree.flatten(like)
    sharding_leaves = treedef.flatten_up_to(shardings)
    with np.load(os.path.join(path, "arrays.npz")) as data:
        if len(data.files) != len(leaves):
            raise ValueError(
                f"{path}/arrays.npz holds {len(data.files)} arrays, the model needs {len(leaves)}"
            )
        restored = []
        for i, (ref, sharding) in enumerate(zip(leaves, sharding_leaves, strict=True)):
            arr = data[f"arr_{i}"]
            if arr.shape != ref.shape or arr.dtype != ref.dtype:
                raise ValueError(
                    f"{path}/arrays.npz leaf {i}: {arr.shape} {arr.dtype}, expected "
                    f"{ref.shape} {ref.dtype} (different model configuration?)"
                )
            restored.append(
                jax.make_array_from_callback(arr.shape, sharding, lambda idx, a=arr: a[idx])
            )
    return jax.tree.unflatten(treedef, restored), meta


def _prune(directory: str, keep: int) -> None:
    steps = sorted(
        int(m.group(1)) for n in os.listdir(directory) if (m := _STEP_DIR.match(n))
    )
    for old in steps[:-keep]:
        shutil.rmtree(os.path.join(directory, f"step_{old:08d}"), ignore_errors=True)

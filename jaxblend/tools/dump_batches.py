"""Dumps the global batches the loader produces, to prove data order across topologies.

Runs `make_loader` for `--steps` steps from `--start_step` on the current process group; process 0
writes `<out>/batches.npz` with every batch key stacked as `[steps, global_batch, ...]` (gathered
from all processes). Run it on two topologies and compare the files:

  python -m jaxblend.tools.dump_batches --data_path="30 /d/a 70 /d/b" --split=969,30,1 \
      --seq_length=2048 --train_samples=100000 --global_batch_size=64 --mesh_shape=8 \
      --mesh_axes=data --steps=4 --out=/tmp/one
  python -m jaxblend.tools.launch_local --num_processes=2 --devices_per_process=4 -- \
      python -m jaxblend.tools.dump_batches <same flags> --mesh_shape=4,2 \
      --mesh_axes=data,tensor --out=/tmp/two

Also takes the data flags of `jaxblend.tools.dump_samples` (or `--mock_data`), the distributed
flags, `--rampup_batch_size` (Megatron's batch-size ramp-up; batches of one size are stacked, so
`--steps` must stay within one size or the file holds one array per step: `<key>/<step>`),
`--state_in` (resume from a loader state JSON) and `--state_out` (write the final state).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from absl import app, flags, logging

from jaxblend import atomic_write, distributed
from jaxblend.tools import _cli, _entry, _step_plan

_BATCH = flags.DEFINE_integer("global_batch_size", 8, "Global batch size B.", lower_bound=1)
_MESH_SHAPE = flags.DEFINE_string("mesh_shape", None, "Mesh shape, e.g. 8 or 4,2 (default: all devices).")
_MESH_AXES = flags.DEFINE_string("mesh_axes", "data", "Mesh axis names, e.g. data or data,tensor.")
_STEPS = flags.DEFINE_integer("steps", 4, "Number of global batches to dump.", lower_bound=1)
_START = flags.DEFINE_integer("start_step", 0, "First global step.", lower_bound=0)
_WHICH = flags.DEFINE_string(
    "which", "train", "Split: train, valid, test, or valid_<k> (--multiple_validation_sets)."
)
_OUT = flags.DEFINE_string("out", None, "Output directory.", required=True)
_WORKERS = flags.DEFINE_integer("worker_count", 0, "Grain worker processes.", lower_bound=0)
_READ_AHEAD = flags.DEFINE_integer(
    "read_ahead", 0, "Steps read concurrently ahead of use (0: 8 from a bucket, else 1).",
    lower_bound=0,
)
_STATE_IN = flags.DEFINE_string("state_in", None, "Loader state JSON to resume from.")
_STATE_OUT = flags.DEFINE_string("state_out", None, "Where process 0 writes the final loader state.")

_cli.define_source_flags()
distributed.define_distributed_flags()


def _stacked(gathered: dict[str, list], first: int) -> dict:
    """`{key: [steps, B, ...]}` when every step has the same batch size, else `{key/step: ...}`
    (steps numbered from `first`)."""
    import numpy as np

    if all(len({v.shape for v in values}) == 1 for values in gathered.values()):
        return {k: np.stack(v) for k, v in gathered.items()}
    return {f"{k}/{first + i}": v for k, values in gathered.items() for i, v in enumerate(values)}


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    distributed.initialize_from_flags()
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from jaxblend.loading import PrefetchOptions, make_loader

    mesh = _cli.mesh_from_flags(_MESH_SHAPE.value, _MESH_AXES.value)
    source = _cli.source_from_flags(_WHICH.value)
    state = None
    if _STATE_IN.value:
        with open(_STATE_IN.value) as f:
            state = json.load(f)
    plan = _step_plan.step_plan(len(source), _BATCH.value)
    loader = make_loader(
        source, mesh, plan=plan, batch_axes=_cli.batch_axes_of(mesh),
        prefetch=PrefetchOptions(worker_count=_WORKERS.value, read_ahead=_READ_AHEAD.value),
        start_step=_START.value, state=state,
    )
    if loader.step + _STEPS.value > loader.num_steps:
        raise app.UsageError(
            f"--steps={_STEPS.value} from step {loader.step} (--start_step/--state_in) exceeds the "
            f"stream's {loader.num_steps} steps ({len(source)} samples, --global_batch_size="
            f"{_BATCH.value}); pass a smaller --steps or a larger --train_samples"
        )
    gathered: dict[str, list[np.ndarray]] = {}
    for _ in range(_STEPS.value):
        batch = next(loader)
        host = multihost_utils.process_allgather(batch, tiled=True)
        for key, value in host.items():
            gathered.setdefault(key, []).append(np.asarray(value))
    if jax.process_index() == 0:
        os.makedirs(_OUT.value, exist_ok=True)
        path = os.path.join(_OUT.value, "batches.npz")
        with atomic_write.atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, **_stacked(gathered, loader.step - _STEPS.value))
        logging.info("wrote %s (%d steps from step %d)", path, _STEPS.value, loader.step - _STEPS.value)
        print(f"wrote {path}")
        if _STATE_OUT.value:
            with atomic_write.atomic_file(_STATE_OUT.value, "w") as f:
                json.dump(loader.state(), f)
    multihost_utils.sync_global_devices("dump_batches done")


if __name__ == "__main__":
    _entry.run(main, megatron_nargs=_step_plan.MEGATRON_NARGS)

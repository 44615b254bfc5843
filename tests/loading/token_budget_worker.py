"""Worker for tests/loading/test_token_budget_multiprocess.py: one JAX process of a bucketed run.

Loads a saved `TokenBudgetPlan` and a `SequenceSource`, iterates `make_loader` over the plan for some steps
and, on process 0, writes every global batch (gathered from all processes) to `--out` (.npz,
keys `"{step}/{key}"`) plus the loader state after the last step (`--out` + ".state.json").

  python tests/loading/token_budget_worker.py --data=PREFIX --plan=DIR --out=FILE.npz \
      --mesh_shape=4,2 --mesh_axes=data,tensor [--start_step=K] [--steps=N] \
      [--coordinator_address=... --num_processes=... --process_id=...]
"""

from __future__ import annotations

import json
import os
import tempfile

from absl import app, flags

from jaxblend import cli

_DATA = flags.DEFINE_string("data", None, "IndexedDataset prefix.", required=True)
_PLAN = flags.DEFINE_string("plan", None, "Saved TokenBudgetPlan directory.", required=True)
_OUT = flags.DEFINE_string("out", None, "Output .npz (process 0).", required=True)
_MESH_SHAPE = flags.DEFINE_string("mesh_shape", "8", "Mesh shape.")
_MESH_AXES = flags.DEFINE_string("mesh_axes", "data", "Mesh axis names.")
_START = flags.DEFINE_integer("start_step", 0, "First step.")
_STEPS = flags.DEFINE_integer("steps", None, "Steps to run (default: to the end).")
_STATE_IN = flags.DEFINE_string("state_in", None, "Resume from this state JSON.")
_WORKERS = flags.DEFINE_integer("worker_count", 0, "Grain workers.")
cli.define_distributed_flags()


def main(argv):
    del argv
    cli.initialize_from_flags()
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from jaxblend.loading import PrefetchOptions, make_loader
    from jaxblend.mesh import default_batch_axes, make_mesh
    from jaxblend.sampling import load_token_budget_plan
    from jaxblend.sources import SequenceSource

    mesh = make_mesh(_MESH_SHAPE.value, _MESH_AXES.value)
    plan = load_token_budget_plan(_PLAN.value)
    source = SequenceSource(_DATA.value, max_length=int(plan.bucket_lengths[-1]), pad_id=0)
    state = None
    if _STATE_IN.value:
        with open(_STATE_IN.value) as f:
            state = json.load(f)
    loader = make_loader(
        source,
        mesh,
        plan=plan,
        batch_axes=default_batch_axes(mesh.axis_names),
        start_step=_START.value,
        state=state,
        prefetch=PrefetchOptions(worker_count=_WORKERS.value),
    )
    first = loader.step
    steps = plan.num_steps - first if _STEPS.value is None else _STEPS.value
    out = {}
    for k in range(steps):
        batch = next(loader)
        for key, value in batch.items():
            out[f"{first + k}/{key}"] = np.asarray(
                multihost_utils.process_allgather(value, tiled=True)
            )
    if jax.process_index() == 0:
        directory = os.path.dirname(os.path.abspath(_OUT.value))
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".npz")
        os.close(fd)
        np.savez(tmp, **out)
        os.replace(tmp, _OUT.value)
        with open(_OUT.value + ".state.json", "w") as f:
            json.dump(loader.state(), f)
    multihost_utils.sync_global_devices("bucketing_worker_done")


if __name__ == "__main__":
    app.run(main)

"""Worker for tests/loading/test_multiprocess.py: one JAX process of a group that runs several
batch dumps in turn, so that a group of processes starts (imports, `jax.distributed`) once.

  python tests/loading/group_worker.py --jobs=JOBS.json \
      --coordinator_address=... --num_processes=N --process_id=I

`JOBS.json` lists the jobs, run in order, each `{"name", "kind", "args", "expect_failure"}`:

* kind `dump_batches`: `jaxblend.tools.dump_batches` run in this process with the command line
  `args` (no distributed flags: the group is joined already);
* kind `token_budget`: a bucketed run of `make_loader` over a saved `TokenBudgetPlan`; `args` is
  `{"data", "plan", "out", "mesh_shape", "mesh_axes", "steps", "state_in"}`, and process 0 writes
  every global batch to `<out>/batches.npz` (keys `"{step}/{key}"`) and the loader state after
  the last step to `<out>/state.json`.

A job that fails when it should not ends the process with its exit code (the launcher stops the
others). Process 0 writes `results.json` next to `JOBS.json`: `{name: {"code": exit code,
"errors": the job's output lines starting with "error:"}}`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os

DISTRIBUTED_TIMEOUT = 60


def _dump_batches(args: list[str]) -> int:
    from jaxblend.tools import dump_batches

    return dump_batches.run(args)


def _token_budget(spec: dict) -> int:
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from jaxblend.loading import make_loader
    from jaxblend.mesh import make_mesh
    from jaxblend.sampling import load_token_budget_plan
    from jaxblend.sources import SequenceSource

    mesh = make_mesh(spec["mesh_shape"], spec["mesh_axes"])
    plan = load_token_budget_plan(spec["plan"])
    source = SequenceSource(spec["data"], max_length=int(plan.bucket_lengths[-1]), pad_id=0)
    state = None
    if spec.get("state_in"):
        with open(spec["state_in"]) as f:
            state = json.load(f)
    loader = make_loader(source, mesh, plan=plan, state=state)
    first = loader.step
    steps = plan.num_steps - first if spec.get("steps") is None else spec["steps"]
    out = {}
    for k in range(steps):
        batch = next(loader)
        for key, value in batch.items():
            out[f"{first + k}/{key}"] = np.asarray(
                multihost_utils.process_allgather(value, tiled=True)
            )
    if jax.process_index() == 0:
        os.makedirs(spec["out"], exist_ok=True)
        np.savez(os.path.join(spec["out"], "batches.npz"), **out)
        with open(os.path.join(spec["out"], "state.json"), "w") as f:
            json.dump(loader.state(), f)
    multihost_utils.sync_global_devices("token_budget job done")
    return 0


_KINDS = {"dump_batches": _dump_batches, "token_budget": _token_budget}


def _run_job(job: dict) -> tuple[int, list[str]]:
    """(exit code, error lines) of one job; its output is echoed after it ends."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        code = _KINDS[job["kind"]](job["args"])
    text = captured.getvalue()
    print(f"--- job {job['name']}: exit {code}\n{text}", end="" if text.endswith("\n") else "\n",
          flush=True)
    return code, [line for line in text.splitlines() if line.startswith("error:")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", required=True)
    parser.add_argument("--coordinator_address", required=True)
    parser.add_argument("--num_processes", type=int, required=True)
    parser.add_argument("--process_id", type=int, required=True)
    options = parser.parse_args()
    from absl import flags

    from jaxblend import distributed
    from jaxblend.tools import _own_process

    if not flags.FLAGS.is_parsed():  # Grain's worker processes read absl flags
        flags.FLAGS.mark_as_parsed()
    _own_process.import_grain_without_orbax()  # no job saves a checkpoint
    distributed.setup(distributed.DistributedConfig(
        options.coordinator_address, options.num_processes, options.process_id,
        timeout_seconds=DISTRIBUTED_TIMEOUT,
    ))
    import jax
    from jax.experimental import multihost_utils

    with open(options.jobs) as f:
        jobs = json.load(f)
    results = {}
    for job in jobs:
        code, errors = _run_job(job)
        if code != 0 and not job.get("expect_failure"):
            return code
        results[job["name"]] = {"code": code, "errors": errors}
    if jax.process_index() == 0:
        path = os.path.join(os.path.dirname(os.path.abspath(options.jobs)), "results.json")
        with open(path + ".tmp", "w") as f:
            json.dump(results, f)
        os.replace(path + ".tmp", path)
    multihost_utils.sync_global_devices("group_worker done")
    return 0


if __name__ == "__main__":
    from jaxblend.tools import _own_process

    _own_process.exit_now(main())
elif __name__ == "__mp_main__":  # a Grain worker process (spawned): Grain without Orbax here too
    from jaxblend.tools import _own_process

    _own_process.import_grain_without_orbax()

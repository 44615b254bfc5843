"""Runs one jaxblend tool as a benchmarked host would: own local state, a line at the first batch.

  python benchmarks/_pod_child.py jaxblend.tools.dump_batches <its flags>

Before jaxblend is imported, the local state a host keeps between runs (identity memo, index-map
mirror, XDG cache, temporary files) is pointed at empty directories under `$POD_CHILD_STATE/host<i>`
(i: the `--process_id=` flag the launcher appends, else 0), so every process starts like a fresh
pod host. Prints `POD_CHILD jaxblend=<package dir>` (the parent checks which tree was imported),
then runs the module as `python -m` would. `jaxblend.loading.make_loader` is wrapped so that the
first batch prints `POD_FIRST_BATCH <unix time> maxrss_kb=<peak RSS so far>`; the last line is
`POD_BATCHES <count> maxrss_kb=<peak RSS>` (printed at exit).

dump_batches gathers every global batch and keeps them all for its `.npz`: 100 batches of 256 x
2,049 tokens hold about 2 GB, which would hide the loader's own memory. With `POD_CHILD_ROWS=1`
`multihost_utils.process_allgather` (still called, so the batch is gathered across processes as
before) hands back only the first row of each array, so the tool keeps one row per step.
"""

from __future__ import annotations

import atexit
import os
import resource
import runpy
import sys
import time


def _process_id(argv: list[str]) -> int:
    for arg in argv:
        if arg.startswith("--process_id="):
            return int(arg.split("=", 1)[1])
    return 0


def _point_local_state(base: str, process_id: int) -> None:
    home = os.path.join(base, f"host{process_id}")
    for sub in ("identity", "mirror", "xdg", "tmp"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)
    os.environ["JAXBLEND_IDENTITY_CACHE"] = os.path.join(home, "identity")
    os.environ["JAXBLEND_INDEX_MIRROR"] = os.path.join(home, "mirror")
    os.environ["XDG_CACHE_HOME"] = os.path.join(home, "xdg")
    os.environ["TMPDIR"] = os.path.join(home, "tmp")


def _maxrss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class _TimedLoader:
    """Delegates to the real loader; reports the first batch and counts batches."""

    def __init__(self, loader):
        self._loader = loader
        self._batches = 0
        atexit.register(lambda: print(
            f"POD_BATCHES {self._batches} maxrss_kb={_maxrss_kb()}", flush=True
        ))

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self._loader)
        self._batches += 1
        if self._batches == 1:
            print(f"POD_FIRST_BATCH {time.time():.6f} maxrss_kb={_maxrss_kb()}", flush=True)
        return batch

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _keep_first_rows() -> None:
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    gather = multihost_utils.process_allgather

    def first_row(value):
        value = np.asarray(value)
        return value[:1].copy() if value.ndim else value

    def first_rows(tree, *a, **k):
        return jax.tree.map(first_row, gather(tree, *a, **k))

    multihost_utils.process_allgather = first_rows


def main() -> None:
    module, args = sys.argv[1], sys.argv[2:]
    base = os.environ.get("POD_CHILD_STATE")
    if base:
        _point_local_state(base, _process_id(args))
    import jaxblend
    import jaxblend.loading
    import jaxblend.loading.loader

    print(f"POD_CHILD jaxblend={os.path.dirname(os.path.abspath(jaxblend.__file__))}", flush=True)
    real = jaxblend.loading.loader.make_loader

    def make_loader(*a, **k):
        return _TimedLoader(real(*a, **k))

    # Both names a tool may import it by (the package re-exports the module's).
    jaxblend.loading.make_loader = make_loader
    jaxblend.loading.loader.make_loader = make_loader
    if os.environ.get("POD_CHILD_ROWS") == "1":
        _keep_first_rows()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""Runs one jaxblend tool as a benchmarked host would: own local state, a line at the first batch.

  python benchmarks/_pod_child.py jaxblend.tools.dump_batches <its flags>

Before jaxblend is imported, the local state a host keeps between runs (identity memo, index-map
mirror, XDG cache, temporary files) is pointed at empty directories under `$POD_CHILD_STATE/host<i>`
(i: the `--process_id=` flag the launcher appends, else 0), so every process starts like a fresh
pod host. Prints `POD_CHILD jaxblend=<package dir>` (the parent checks which tree was imported),
then runs the module as `python -m` would. `jaxblend.loading.make_loader` is wrapped (when the
tool first imports the loader: the tool imports its libraries in its own order) so that the
first batch prints `POD_FIRST_BATCH <unix time> maxrss_kb=<peak RSS so far>`; the last line is
`POD_BATCHES <count> maxrss_kb=<peak RSS>` (printed at exit).

dump_batches gathers every global batch and keeps them all for its `.npz`: 100 batches of 256 x
2,049 tokens hold about 2 GB, which would hide the loader's own memory. With `POD_CHILD_ROWS=1`
`multihost_utils.process_allgather` (still called, so the batch is gathered across processes as
before) hands back only the first row of each array, so the tool keeps one row per step.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
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


def _wrap_make_loader(module) -> None:
    """Makes `module.make_loader` (the name `jaxblend.loading` re-exports once the module has
    run) return a `_TimedLoader`."""
    real = module.make_loader

    def make_loader(*a, **k):
        return _TimedLoader(real(*a, **k))

    module.make_loader = make_loader


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` once module `name` has run (its first import), before the importer
    sees it."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        run, then = spec.loader.exec_module, self.then

        def exec_module(module):
            run(module)
            then(module)

        spec.loader.exec_module = exec_module
        return spec


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

    print(f"POD_CHILD jaxblend={os.path.dirname(os.path.abspath(jaxblend.__file__))}", flush=True)
    # The loader module is wrapped when the tool imports it, so the tool imports its libraries
    # (JAX, Grain) in its own order and way.
    sys.meta_path.insert(0, _AfterImport("jaxblend.loading.loader", _wrap_make_loader))
    if os.environ.get("POD_CHILD_ROWS") == "1":
        _keep_first_rows()
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""Test-suite set-up shared by every test.

* JAX sees 8 CPU devices in the pytest process (multi-device meshes without accelerators). The
  setting must precede the first `import jax`, hence it lives here; so does `OMP_NUM_THREADS=1`
  (PyTorch, for the Megatron parity tests, on one thread).
* One JAX persistent compilation cache serves the whole run (a temporary directory, removed at
  exit): the pytest process and every process a test starts (they inherit the environment)
  compile a given step function once, not once per training run. A cache hit gives the same
  executable, so results are the same bytes; only the run time changes.
* absl flags are marked parsed: Grain worker processes read absl flags and, in grain 0.2.18,
  fail when they were never parsed.
* With JAXBLEND_STRICT_EXTRAS=1 (set by `dev.py test`, i.e. in CI) any skip fails the run, at
  collection or at run time (plugin `strict_skips`); only `@pytest.mark.allowed_skip(reason)` exempts.
* The test files that take longest run first (plugin `slow_files_first`, times listed in
  `file_seconds.txt`), so `dev.py test`'s two pytest-xdist workers finish together.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One OpenMP thread (PyTorch's intra-op pool, read when torch starts): the suite's tensors are
# tiny, and on the shared cores a pool's threads spin for each other (Megatron's `GPTDataset`
# spent 0.04 s of CPU in each 16 x 16 `torch.tril`, 100 times what one thread takes).
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _share_jax_compilation_cache() -> None:
    """Points JAX's persistent compilation cache at one directory for this run and its children
    (an outer run's directory when one is set already, e.g. by pytest-xdist's controller)."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    directory = tempfile.mkdtemp(prefix="jaxblend-tests-jax-cache-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = directory
    # Every executable that took 0.1 s or more to compile is kept, however small (the suite's
    # models are): a training run's steps and checkpoint functions, not each eager operation of
    # the unit tests, whose thousands of entries would make each write's size scan (below) slow.
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    # A size bound makes JAX lock the directory (filelock) around each read and write: JAX writes
    # an entry in place, so without the lock a process could read one another is still writing
    # (the processes of a multi-process job, pytest-xdist's workers) and warn on stderr. Each
    # write then sums the sizes of all entries, hence few entries.
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(8 << 30)


_share_jax_compilation_cache()

from absl import flags

pytest_plugins = ["strict_skips", "slow_files_first", "pytester", "fixtures_object_store"]

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()

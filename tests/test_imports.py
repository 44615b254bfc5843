"""The pure layers load no I/O stack: importing them in a fresh interpreter pulls in neither
TensorStore, JAX nor Grain (and `import jaxblend` alone loads nothing heavy); a cached open calls
no kernel and loads nothing that only a map build needs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers_data import write_random_dataset

HEAVY = ("tensorstore", "jax", "grain")


@pytest.mark.parametrize(
    "statement",
    [
        "import jaxblend",
        "import jaxblend.index",
        "import jaxblend.sampling",
        "from jaxblend.index import build_data_maps, build_masked_index, estimate",
        "from jaxblend.sampling import FixedStepPlan, RampupStepPlan, plan_token_budget, ProcessRows",
        "import jaxblend.access",
    ],
)
def test_pure_layers_load_no_io_stack(statement):
    code = f"import sys\n{statement}\nprint([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_facade_still_resolves_every_name():
    code = "import jaxblend\nfor n in jaxblend.__all__: getattr(jaxblend, n)\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


_CACHED_OPEN = """
import sys
from jaxblend import index
from jaxblend.access import DataAccess, IdentityStoreOptions, MapStoreOptions
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

prefixes, cache, memo = {prefixes!r}, {cache!r}, {memo!r}
access = DataAccess(maps=MapStoreOptions(location=cache), identity=IdentityStoreOptions(local_dir=memo))
blend = [str(v) for p in prefixes for v in (1.0, p)]
config = index.GPTDataConfig(
    blend=blend, split="100,0,0", seq_length=16, seed=7, num_samples=(64, None, None)
)
source = open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]
print(sorted(m for m in {modules!r} if m in sys.modules))
source.get_batch([0, 5, 9])
print(sorted(m for m in {modules!r} if m in sys.modules))
"""

# What a cached open must not load: Numba's compiler target (its first kernel call imports
# `numba.np.arraymath`, which imports scipy.linalg for its BLAS check; ~0.3 s, paid by the first
# batch), the progress bars of a map build, and JAX and Grain (a source reads without them; ~0.8 s).
_NOT_AT_A_CACHED_OPEN = ("numba.np.arraymath", "scipy.linalg", "tqdm", "jax", "grain")


def test_a_cached_open_calls_no_kernel_and_loads_no_build_module(tmp_path):
    from jaxblend import index
    from jaxblend.access import DataAccess, IdentityStoreOptions, MapStoreOptions
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    rng = np.random.default_rng(3)
    prefixes = [write_random_dataset(str(tmp_path / f"d{j}"), rng, 30) for j in range(3)]
    cache, memo = str(tmp_path / "maps"), str(tmp_path / "identity")
    access = DataAccess(
        maps=MapStoreOptions(location=cache), identity=IdentityStoreOptions(local_dir=memo)
    )
    config = index.GPTDataConfig(
        blend=[str(v) for p in prefixes for v in (1.0, p)], split="100,0,0", seq_length=16,
        seed=7, num_samples=(64, None, None),
    )
    open_gpt_sources(config, GPTSchemaOptions(), access=access)  # builds the maps
    entries = sorted(os.listdir(cache))
    code = _CACHED_OPEN.format(
        prefixes=prefixes, cache=cache, memo=memo, modules=_NOT_AT_A_CACHED_OPEN
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=300)
    after_open, after_batch = out.stdout.strip().splitlines()
    assert after_open == "[]", out.stdout + out.stderr
    assert "numba.np.arraymath" in after_batch, out.stdout  # the first batch starts Numba
    assert "jax" not in after_batch and "grain" not in after_batch, out.stdout
    assert sorted(os.listdir(cache)) == entries  # the open was cached: the child built nothing

"""The pure layers load no I/O stack: importing them in a fresh interpreter pulls in neither
TensorStore, JAX nor Grain (and `import jaxblend` alone loads nothing heavy)."""

from __future__ import annotations

import subprocess
import sys

import pytest

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

"""`import_grain_without_orbax`: Grain imported without Orbax, Orbax still importable after, and
the ordinary import when a Grain needs Orbax. Fresh processes: what a process has imported is
the point."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script: str, *paths: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, ROOT])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_grain_without_orbax_then_orbax_on_demand():
    out = _run("""
        import sys
        from jaxblend.tools._grain_import import import_grain_without_orbax
        import_grain_without_orbax()
        print("grain" in sys.modules, "orbax.checkpoint" in sys.modules)
        import grain
        from jaxblend.loading import make_loader  # the loader's Grain is this one
        import orbax.checkpoint as ocp
        print(ocp.__name__, hasattr(ocp, "CheckpointManager"))
    """)
    assert out.split() == ["True", "False", "orbax.checkpoint", "True"]


def test_a_grain_that_needs_orbax_is_imported_the_ordinary_way(tmp_path):
    fake = tmp_path / "grain"
    fake.mkdir()
    (fake / "__init__.py").write_text("import orbax.checkpoint\nWITH_ORBAX = True\n")
    out = _run("""
        import sys
        from jaxblend.tools._grain_import import import_grain_without_orbax
        import_grain_without_orbax()
        import grain
        print(grain.WITH_ORBAX, sys.modules["orbax.checkpoint"] is not None)
    """, str(tmp_path))
    assert out.split() == ["True", "True"]

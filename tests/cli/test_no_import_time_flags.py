"""No flag is defined as a side effect of an import; groups are defined by entry points only."""

from __future__ import annotations

import json
import subprocess
import sys

_IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
from absl import flags
import jaxblend

names = sorted(m.name for m in pkgutil.walk_packages(jaxblend.__path__, "jaxblend."))
failed = []
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as err:  # an optional extra that is not installed
        failed.append(f"{name}: {err}")
ours = sorted(
    n for n in flags.FLAGS
    if (flags.FLAGS.find_module_defining_flag(n) or "").startswith(("jaxblend", "__main__"))
)
print(len(names), "modules")
print("failed:", failed)
print("jaxblend flags:", ours)
"""


def test_importing_every_jaxblend_module_defines_no_flag():
    # A fresh interpreter: absl's global FLAGS of this test process hold the tests' flags.
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERYTHING], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert int(out[0].split()[0]) > 50, out  # the walk saw the package
    assert out[1] == "failed: []", out[1]
    assert out[2] == "jaxblend flags: []", out[2]


_EVERY_GROUP = """
import json
from absl import flags
from jaxblend import cli
groups = [cli.define_data_flags, cli.define_schema_flags, cli.define_source_flags,
          cli.define_step_plan_flags, cli.define_mesh_flags, cli.define_loader_flags,
          cli.define_distributed_flags, cli.define_train_flags]
for define in groups:
    define()
print(json.dumps(sorted({flags.FLAGS.find_module_defining_flag(n) for n in flags.FLAGS
              if flags.FLAGS.find_module_defining_flag(n).startswith("jaxblend")})))
try:
    cli.define_data_flags()
except flags.DuplicateFlagError:
    print("defined once")
"""


def test_flag_groups_live_in_the_cli_package_and_are_defined_once():
    out = subprocess.run(
        [sys.executable, "-c", _EVERY_GROUP], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    modules = json.loads(out[0])
    assert modules and all(m.startswith("jaxblend.cli.") for m in modules), modules
    assert out[1] == "defined once"


_LAUNCHER_AND_JAX_FLAGS = """
from absl import flags
import jaxblend.tools.launch_local  # a library import defines no flags
from jaxblend import cli
cli.define_distributed_flags()
print(flags.FLAGS["num_processes"].help)
"""


def test_importing_the_launcher_leaves_num_processes_to_the_jax_flags():
    out = subprocess.run(
        [sys.executable, "-c", _LAUNCHER_AND_JAX_FLAGS], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == (
        "Number of JAX processes in the run (default: detected by JAX; 1 on a single host)."
    )

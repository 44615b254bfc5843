"""Tests of `jaxblend.define_once`: flag groups defined once whoever asks for them."""

from __future__ import annotations

import subprocess
import sys

from absl import flags

from jaxblend.define_once import define_once


def test_body_runs_once_and_flags_stay_defined():
    values = flags.FlagValues()
    calls = []

    @define_once("alpha", flag_values=values)
    def define():
        calls.append(1)
        flags.DEFINE_integer("alpha", 1, "a flag", flag_values=values)

    define()
    define()  # a second definition would raise DuplicateFlagError
    assert calls == [1]
    assert "alpha" in values
    assert define.__name__ == "define"


def test_sentinel_already_defined_skips_the_body():
    values = flags.FlagValues()
    flags.DEFINE_string("beta", "x", "defined elsewhere", flag_values=values)
    calls = []

    @define_once("beta", flag_values=values)
    def define():
        calls.append(1)

    define()
    assert calls == []


def test_without_sentinel_the_first_call_always_runs():
    values = flags.FlagValues()
    calls = []

    @define_once(flag_values=values)
    def define():
        calls.append(1)

    define()
    define()
    assert calls == [1]


_REQUEST_TWICE = """
from absl import flags
from jaxblend import distributed
from jaxblend import flags as data_flags
from jaxblend.tools import _cli
for _ in range(2):
    data_flags.define_data_flags()
    _cli.define_source_flags()
    distributed.define_distributed_flags()
print(all(n in flags.FLAGS for n in ("data_path", "mock_data", "coordinator_address")))
"""


def test_project_flag_groups_can_be_requested_repeatedly():
    # A fresh interpreter: absl's global FLAGS of this test process hold other tools' flags.
    out = subprocess.run(
        [sys.executable, "-c", _REQUEST_TWICE], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "True"


_LAUNCHER_AND_JAX_FLAGS = """
from absl import flags
import jaxblend.tools.launch_local  # a library import defines no flags
from jaxblend import distributed
distributed.define_distributed_flags()
print(flags.FLAGS["num_processes"].help)
"""


def test_importing_the_launcher_leaves_num_processes_to_the_jax_flags():
    out = subprocess.run(
        [sys.executable, "-c", _LAUNCHER_AND_JAX_FLAGS], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "Number of JAX processes in the run."

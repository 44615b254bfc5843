"""Test-suite set-up shared by every test.

* JAX sees 8 CPU devices in the pytest process (multi-device meshes without accelerators). The
  setting must precede the first `import jax`, hence it lives here.
* absl flags are marked parsed: Grain worker processes read absl flags (ENV_NOTES: grain 0.2.18).
* With JAXBLEND_STRICT_EXTRAS=1 (set by `dev.py test`, i.e. in CI) a test skipped because an optional
  dependency is missing fails instead: CI installs every extra, so such a skip hides a broken install.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest
from absl import flags

pytest_plugins = ["fixtures_object_store"]

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("JAXBLEND_STRICT_EXTRAS") == "1" and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if "could not import" in reason or "No module named" in reason:
            report.outcome = "failed"
            report.longrepr = f"optional dependency missing under JAXBLEND_STRICT_EXTRAS: {reason}"

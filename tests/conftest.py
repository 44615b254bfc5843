"""Test-suite set-up shared by every test.

* JAX sees 8 CPU devices in the pytest process (multi-device meshes without accelerators). The
  setting must precede the first `import jax`, hence it lives here.
* absl flags are marked parsed: Grain worker processes read absl flags and, in grain 0.2.18,
  fail when they were never parsed.
* With JAXBLEND_STRICT_EXTRAS=1 (set by `dev.py test`, i.e. in CI) any skip fails the run, at
  collection or at run time (plugin `strict_skips`); only `@pytest.mark.allowed_skip(reason)` exempts.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import flags

pytest_plugins = ["strict_skips", "pytester", "fixtures_object_store"]

if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()

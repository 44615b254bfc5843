"""Only the command-line layer touches absl flags: `jaxblend/cli/` defines and reads them, the
entry-point modules (the tools and the training example) read them; the library takes plain
arguments. The core package does not need optax (the training example's extra)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jaxblend

PACKAGE = Path(jaxblend.__file__).parent
# Programs run by `jaxblend.cli.call`: they may read the flags they had defined.
ENTRY_MODULES = {
    "train.py",
    "tools/build_index.py",
    "tools/dump_batches.py",
    "tools/dump_samples.py",
    "tools/inspect.py",
    "tools/launch_local.py",
    "tools/preprocess.py",
}
# Grain reads one flag of its own before absl has parsed (grain 0.2): this module lets it, and
# touches no other flag (checked below).
GRAIN_FLAG_MODULE = "grain_workers.py"
_READS = re.compile(r"(?<![A-Za-z0-9_])FLAGS\b")
_DEFINES = re.compile(r"\bDEFINE_[a-z_]+\(|\bflags\.declare_key_flag\(")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8")


def test_only_cli_and_entry_modules_read_flags():
    readers = sorted(
        rel for rel, text in _modules()
        if _READS.search(text) and not rel.startswith("cli/") and rel not in ENTRY_MODULES
    )
    assert readers == [GRAIN_FLAG_MODULE]


def test_the_grain_module_touches_only_grains_own_flag():
    text = (PACKAGE / GRAIN_FLAG_MODULE).read_text(encoding="utf-8")
    lookups = re.findall(r"FLAGS\[([^\]]+)\]", text)
    assert lookups and set(lookups) == {"GRAIN_PROFILING_FLAG"}
    assert re.search(r'GRAIN_PROFILING_FLAG = "grain_[a-z_]+"', text)
    assert not re.search(r"FLAGS\.(?!is_parsed\(\))[a-z_]+", text)


def test_only_cli_defines_flags():
    definers = sorted(
        rel for rel, text in _modules() if _DEFINES.search(text) and not rel.startswith("cli/")
    )
    assert definers == []


def test_the_patterns_find_what_they_look_for():
    assert _READS.search("fl = flags.FLAGS") and not _READS.search('env["XLA_FLAGS"]')
    assert _DEFINES.search('flags.DEFINE_integer("x", 1, "x")')


def test_train_and_peer_watch_import_no_private_module():
    private = re.compile(r"^\s*(from|import)\s+jaxblend\S*\._", re.MULTILINE)
    private_from = re.compile(r"^\s*from\s+jaxblend\S*\s+import\s+_", re.MULTILINE)
    for rel in ("train.py", "peer_watch.py", *(
        p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "training").glob("*.py")
    )):
        text = (PACKAGE / rel).read_text(encoding="utf-8")
        assert not private.search(text) and not private_from.search(text), rel


_CORE_IMPORTS = """
import sys
import jaxblend, jaxblend.cli, jaxblend.loading, jaxblend.sources, jaxblend.sampling
import jaxblend.mesh, jaxblend.distributed, jaxblend.peer_watch
print("optax" in sys.modules, "jax" in sys.modules)
"""


def test_the_core_package_does_not_import_optax():
    out = subprocess.run(
        [sys.executable, "-c", _CORE_IMPORTS], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "True"]  # loading did import JAX: the check is live

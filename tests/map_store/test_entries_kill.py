"""kill -9 an index-cache build in its write phase: nothing half-written is read, the rerun's
entry is byte-identical to an uninterrupted build's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers_kill import ROOT, kill_at, run_here

from jaxblend.map_store import entries as cache

BUILD = """
import sys
import numpy as np
from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import load_or_build_data_maps
lengths = np.random.default_rng(4).integers(1, 60, 3000).astype(np.int32)
infos = {p: index.DatasetInfo(p, lengths[k::2], np.arange(len(lengths[k::2]) + 1), str(k) * 64)
         for k, p in enumerate(("/d/a", "/d/b"))}
config = index.GPTDataConfig(blend=("1", "/d/a", "2", "/d/b"), split="90,10,0", seq_length=16,
                             num_samples=(500, 40, None))
plan = load_or_build_data_maps(config, infos, DataAccess(maps=MapStoreOptions(sys.argv[1])))
print(plan.fingerprint)
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    """BUILD as a file: run by the killed child, and in this process for the reruns."""
    path = tmp_path_factory.mktemp("script") / "build.py"
    path.write_text(BUILD)
    return str(path)


def _build_in_a_process(script, cache_dir):
    out = subprocess.run([sys.executable, script, str(cache_dir)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def _entry_bytes(cache_dir, key):
    entry = cache_dir / key
    return {p.name: p.read_bytes() for p in sorted(entry.iterdir())}


@pytest.fixture(scope="module")
def reference(script, tmp_path_factory):
    cache_dir = tmp_path_factory.mktemp("reference")
    key = _build_in_a_process(script, cache_dir)
    return key, _entry_bytes(cache_dir, key)


@pytest.mark.parametrize("written", [0, 3, "all"])
def test_kill_9_while_writing_the_entry(script, reference, tmp_path, written, monkeypatch):
    key, expected = reference
    arrays = len([n for n in expected if n.endswith(".npy")])
    point = f"cache-write:{arrays if written == 'all' else written}"
    kill_at([script, str(tmp_path)], point)
    # Only the private temporary directory exists: the entry was never published.
    names = os.listdir(tmp_path)
    assert key not in names and [n for n in names if n.startswith(f".tmp-{key}-")], names
    assert cache.load(str(tmp_path), key) is None
    # The rerun (here) gives the entry another process built uninterrupted, byte for byte.
    assert run_here([script, str(tmp_path)], monkeypatch).strip() == key
    assert _entry_bytes(tmp_path, key) == expected
    assert cache.load(str(tmp_path), key, "full") is not None

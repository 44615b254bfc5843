"""kill -9 preprocessing during its final merge: the rerun is byte-identical, nothing half-written
is ever published."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
from helpers_kill import ROOT, kill_at

from jaxblend import IndexedDataset
from jaxblend.storage.idx_format import IndexFormatError
from tests.preprocess.conftest import make_documents, read_bytes

PARTS = 6


def _args(src, prefix):
    return ["-m", "jaxblend.tools.preprocess", f"--input={src}", f"--output_prefix={prefix}",
            "--tokenizer_type=byte", "--append_eod", f"--partitions={PARTS}", "--workers=1", "--noprogress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill_merge")
    src = root / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in make_documents(600, seed=2)))
    ref = root / "ref" / "c"
    out = subprocess.run([sys.executable, *_args(src, ref)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=False, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    return src, read_bytes(f"{ref}_text_document")


@pytest.mark.parametrize("merged", [0, 3, PARTS], ids=["first_part", "middle", "before_publish"])
def test_kill_9_during_the_merge_then_rerun(corpus, tmp_path, merged):
    src, reference = corpus
    prefix = tmp_path / "c"
    kill_at(_args(src, prefix), f"merge:{merged}")
    name = f"{prefix}_text_document"
    # Killed mid-merge: the merged output exists only under temporary names, never published.
    assert not os.path.exists(name + ".idx") and not os.path.exists(name + ".bin")
    assert glob.glob(name + ".bin.tmp-*"), os.listdir(tmp_path)
    with pytest.raises(IndexFormatError, match="does not exist"):
        IndexedDataset(name)
    out = subprocess.run([sys.executable, *_args(src, prefix)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=False, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{PARTS} partitions ({PARTS} reused)" in out.stdout  # only the merge was redone
    assert read_bytes(name) == reference
    assert not glob.glob(str(tmp_path / "*.tmp-*")), os.listdir(tmp_path)

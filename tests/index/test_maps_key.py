"""The index-map cache key: the index code digest is part of it."""

from __future__ import annotations

import os
import shutil

import numpy as np

from jaxblend import index
from jaxblend.index import maps_key


def test_kernel_code_changes_change_the_fingerprint(tmp_path, monkeypatch):
    package = os.path.dirname(maps_key.__file__)
    copy = tmp_path / "index"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = maps_key.sources_digest(str(copy))
    assert before == maps_key.code_digest()
    with open(copy / "sample_index.py", "a") as f:
        f.write("\n# a kernel edit\n")
    assert maps_key.sources_digest(str(copy)) != before

    infos = {"/d/a": index.DatasetInfo("/d/a", np.full(50, 9, np.int32), np.arange(51), "a" * 64)}
    config = index.GPTDataConfig(blend=("/d/a",), split="1,0,0", seq_length=8)
    key = index.build_data_maps(config, infos).fingerprint
    monkeypatch.setattr(maps_key, "code_digest", lambda: "another kernel")
    assert index.build_data_maps(config, infos).fingerprint != key

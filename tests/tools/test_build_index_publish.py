"""build_index with a bucket --data_cache_path publishes the plan and prints the record's URL; a
rerun with unchanged data writes nothing (fake-gcs-server and moto)."""

from __future__ import annotations

import subprocess

import numpy as np
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import publication, record


def _build_index(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    done = run_tool("jaxblend.tools.build_index", [*args], cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_build_index_publishes_once(object_store, tmp_path):
    rng = np.random.default_rng(2)
    local = write_random_dataset(str(tmp_path / "a"), rng, 60, lengths=(3, 30))
    prefix = object_store.upload(local, f"bi-{object_store.scheme}/a")
    url = object_store.prefix_url(f"bi-{object_store.scheme}/maps")
    args = [f"--data_path={prefix}", "--split=90,10,0", "--seq_length=16",
            "--train_samples=50", "--valid_samples=5", "--test_samples=0",
            f"--data_cache_path={url}", f"--data_cache_mirror={tmp_path / 'mirror'}"]
    if object_store.scheme == "s3":
        args.append(f"--s3_endpoint={object_store.url}")
    config = index.GPTDataConfig(blend=[prefix], split="90,10,0", seq_length=16,
                                 num_samples=(50, 5, 0))
    expected = record.record_url(url, record.launch_key(config))

    first = _build_index(args, str(tmp_path))
    assert f"published: {expected}" in first.stdout.splitlines(), first.stdout
    second = _build_index(args, str(tmp_path))
    assert f"already published: {expected}" in second.stdout.splitlines(), second.stdout
    reader = DataAccess.from_env(maps=MapStoreOptions(location=url, builder=False,
                                                     mirror=str(tmp_path / "reader")))
    found = publication.read(config, reader)
    assert found is not None and sorted(found.splits) == ["train", "valid"]

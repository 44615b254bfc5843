"""A blend read from a bucket (fake-gcs-server, moto S3) gives the batches of the same files on disk.

Covers `open_gpt_sources` over bucket prefixes, the loader with read-ahead and Grain worker
processes (datasets re-opened in the worker with the parent's object-store settings), and the
`--s3_endpoint` flag of a CLI in a fresh process.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

ROOT = Path(__file__).resolve().parents[2]
EOD = 0
SEQ = 32
B = 16
_runs = itertools.count()


@pytest.fixture(scope="module")
def local_prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("bucket_loader")
    rng = np.random.default_rng(11)
    return [
        write_random_dataset(str(root / f"p{k}"), rng, n, lengths=(1, 90), vocab=(1, 3000), eod=EOD)
        for k, n in enumerate((60, 90, 40, 120))
    ]


def _config(prefixes):
    blend = [x for k, p in enumerate(prefixes) for x in (str(10 + 7 * k), p)]
    return index.GPTDataConfig(blend=blend, split="90,10,0", seq_length=SEQ, seed=3,
                               num_samples=(B * 6, B, None))


def _maps_at(path) -> DataAccess:
    return DataAccess.from_env().with_maps(location=str(path))


def _upload_all(server, prefixes) -> list[str]:
    run = next(_runs)
    return [server.upload(p, f"blend{run}/{Path(p).name}") for p in prefixes]


def _host(batch):
    return {k: np.asarray(jax.device_get(v)) for k, v in batch.items()}


OPTIONS = GPTSchemaOptions(eod_id=EOD, eod_mask_loss=True, reset_position_ids=True)


def test_blend_batches_equal_local(object_store, local_prefixes, tmp_path):
    urls = _upload_all(object_store, local_prefixes)
    local = open_gpt_sources(_config(local_prefixes), OPTIONS)
    remote = open_gpt_sources(_config(urls), OPTIONS, access=_maps_at(tmp_path / "cache"))
    for split in ("train", "valid"):
        # Identity is content, not location: a run moves its data to a bucket and resumes.
        assert remote[split].fingerprint == local[split].fingerprint
        ids = np.arange(len(local[split]))
        got, want = remote[split].get_batch(ids), local[split].get_batch(ids)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert remote["train"].reads_remote and not local["train"].reads_remote
    assert remote["train"].requests_issued > 0
    mesh = jax.make_mesh((8,), ("data",))
    want = [_host(b) for b in make_loader(local["train"], mesh, global_batch_size=B)]
    got = [_host(b) for b in make_loader(remote["train"], mesh, global_batch_size=B,
                                      prefetch=PrefetchOptions(read_ahead=4))]
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        for key in w:
            np.testing.assert_array_equal(g[key], w[key], err_msg=key)
    # Cached start: the maps come from the cache, reads match again.
    again = open_gpt_sources(_config(urls), OPTIONS, access=_maps_at(tmp_path / "cache"))["train"]
    np.testing.assert_array_equal(again.get_batch(np.arange(B))["inputs"],
                                  local["train"].get_batch(np.arange(B))["inputs"])


def test_worker_process_reads_the_bucket(s3_server, local_prefixes, monkeypatch):
    with s3_server.pointed_at():
        urls = _upload_all(s3_server, local_prefixes)
    from jaxblend.access import ObjectStoreOptions

    # The endpoint travels with the sources, not through the environment.
    options = ObjectStoreOptions(s3_endpoint=s3_server.url, s3_region="us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    for name in ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    access = DataAccess.from_env(object_store=options)
    remote = open_gpt_sources(_config(urls), OPTIONS, access=access)["train"]
    local = open_gpt_sources(_config(local_prefixes), OPTIONS)["train"]
    mesh = jax.make_mesh((8,), ("data",))
    got = [_host(b) for b in make_loader(remote, mesh, global_batch_size=B, num_steps=3,
                                         prefetch=PrefetchOptions(worker_count=1))]
    want = [_host(b) for b in make_loader(local, mesh, global_batch_size=B, num_steps=3)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g["inputs"], w["inputs"])


def _dump(data_path: str, out: Path, env: dict[str, str], *extra: str) -> dict[str, np.ndarray]:
    args = [f"--data_path={data_path}", "--split=90,10,0", f"--seq_length={SEQ}", "--seed=3",
            f"--train_samples={B * 6}", f"--valid_samples={B}", f"--global_batch_size={B}",
            "--steps=2", f"--out={out}", *extra]
    proc = run_tool("jaxblend.tools.dump_batches", args, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out / "batches.npz") as z:
        return dict(z)


def test_cli_s3_endpoint_flag(s3_server, local_prefixes, tmp_path):
    with s3_server.pointed_at():
        urls = _upload_all(s3_server, local_prefixes)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXBLEND_S3", "AWS_ENDPOINT"))}
    env.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", JAX_PLATFORMS="cpu")
    blend = " ".join(f"{10 + 7 * k} {p}" for k, p in enumerate(urls))
    local_blend = " ".join(f"{10 + 7 * k} {p}" for k, p in enumerate(local_prefixes))
    got = _dump(blend, tmp_path / "s3", env, f"--s3_endpoint={s3_server.url}")
    want = _dump(local_blend, tmp_path / "local", env)
    np.testing.assert_array_equal(got["inputs"], want["inputs"])
    np.testing.assert_array_equal(got["dataset_ids"], want["dataset_ids"])

"""dump_batches: every storage and cache flag reaches the Grain worker processes.

The flags are a `DataAccess` passed to the sources and pickled into each worker with them (no
process-wide defaults): with `--worker_count=1` against the local S3 server (moto) and the local
GCS server (fake-gcs-server), the batches equal `--worker_count=0` byte for byte, with the S3
endpoint given only as `--s3_endpoint` (no endpoint in the environment: a worker that lost the
flag would try AWS and fail) and the index maps in a bucket map store: the first run publishes
them, the second starts from the publication record (row tables and `.bin` read by range).
Both runs are in the test process; the Grain worker is a real (spawned) process.
"""

from __future__ import annotations

import itertools
import os
import tempfile

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

B, SEQ = 8, 16
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_runs = itertools.count()


@pytest.fixture(scope="module")
def local_prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("dump_batches")
    rng = np.random.default_rng(5)
    return [
        write_random_dataset(str(root / name), rng, docs, lengths=(2, 60), vocab=(1, 900))
        for name, docs in (("a", 90), ("b", 130))
    ]


def _environment(server, kind: str) -> dict[str, str]:
    """The test process's environment with credentials but no S3 endpoint (GCS: the emulator's
    URL stays TensorStore's own variable) and no identity-memo override."""
    env = {k: v for k, v in os.environ.items() if k not in (*ENDPOINT_ENVS, "JAXBLEND_IDENTITY_CACHE")}
    env.update({k: v for k, v in server.environ().items() if k not in ENDPOINT_ENVS})
    env["XDG_CACHE_HOME"] = env.get("XDG_CACHE_HOME", "/nonexistent-xdg-for-test")
    if kind == "s3":
        assert not any(k in env for k in ENDPOINT_ENVS)
    return env


def _dump(args: list[str], env: dict[str, str], out: str, workers: int) -> dict[str, np.ndarray]:
    done = run_tool("jaxblend.tools.dump_batches",
                    [*args, f"--out={out}", f"--worker_count={workers}"], env=env,
                    cwd=out.rsplit("/", 1)[0])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    with np.load(os.path.join(out, "batches.npz")) as f:
        return {k: f[k] for k in f.files}


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_every_storage_and_cache_flag_reaches_a_worker(
    kind, request, local_prefixes, tmp_path, monkeypatch
):
    server = request.getfixturevalue(f"{kind}_server")
    run = next(_runs)
    urls = [server.upload(p, f"dump{run}/{os.path.basename(p)}") for p in local_prefixes]
    maps_url = server.prefix_url(f"dump{run}/maps")
    env = _environment(server, kind)
    # Where a map mirror would go without --data_cache_mirror: the worker's (spawned: it reads
    # $TMPDIR) and the test process's own temporary directory.
    env["TMPDIR"] = str(tmp_path / "tmp")
    os.makedirs(env["TMPDIR"])
    monkeypatch.setattr(tempfile, "tempdir", env["TMPDIR"])
    args = [
        f"--data_path=40 {urls[0]} 60 {urls[1]}", "--split=90,10,0", f"--seq_length={SEQ}",
        "--train_samples=200", "--valid_samples=16", f"--global_batch_size={B}", "--steps=3",
        "--mesh_shape=8", "--num_cpu_devices=8", "--storage_retries=1", "--storage_timeout=30",
        f"--data_cache_path={maps_url}", "--data_cache_wait=60",
    ]
    if kind == "s3":
        args.append(f"--s3_endpoint={server.url}")
    inline = _dump([*args, f"--data_cache_mirror={tmp_path / 'mirror0'}"], env,
                   str(tmp_path / "w0"), workers=0)
    # Another mirror: the second run fetches the published maps from the bucket.
    worker = _dump([*args, f"--data_cache_mirror={tmp_path / 'mirror1'}"], env,
                   str(tmp_path / "w1"), workers=1)
    assert inline.keys() == worker.keys() and "inputs" in inline
    for key, value in inline.items():
        assert value.dtype == worker[key].dtype and value.shape == worker[key].shape, key
        assert value.tobytes() == worker[key].tobytes(), key
    # The maps went through the bucket store and its mirrors; the identities of the bucket
    # datasets to <data_cache_path>/identity/.
    # The first run published the maps and row tables through its mirror; the second started
    # from the publication record and downloaded no entry into its own.
    assert any((tmp_path / "mirror0").rglob("manifest.json"))
    assert any(p.parent.name.endswith("-rows") for p in (tmp_path / "mirror0").rglob("manifest.json"))
    assert not any((tmp_path / "mirror1").rglob("manifest.json"))
    assert not (tmp_path / "tmp" / "jaxblend-index-mirror").exists()  # no process lost the flag
    with server.pointed_at():
        keys = [bytes(k).decode() for k in server.kvstore().list().result()]
    assert any(k.startswith(f"dump{run}/maps/identity/") for k in keys), keys
    assert any(k.startswith(f"dump{run}/maps/") and k.endswith("/COMMITTED") for k in keys), keys
    assert any(k.startswith(f"dump{run}/maps/published/") for k in keys), keys

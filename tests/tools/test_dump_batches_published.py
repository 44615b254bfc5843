"""dump_batches on 2 real JAX processes with a bucket map store (moto S3), each process reaching
the bucket through its own counting proxy:

* nothing published yet: process 0 (the builder) opens the datasets and publishes; process 1
  checks its `.bin` objects exist, waits for the record, then reads only row-table ranges and
  `.bin` ranges: no `.idx`, no whole `.bin`, no map entry, no identity memo. The batches equal the old path's (a local map store).
* a `.bin` rewritten after publishing: both processes refuse it with one line naming it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_fault_proxy import LoggingProxy
from helpers_multiproc import Job

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]
B, SEQ, STEPS = 8, 16, 3
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def local_prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    rng = np.random.default_rng(12)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(2, 60), vocab=(1, 900))
        for n, d in (("a", 90), ("b", 130))
    ]


def _batches(out: str) -> dict[str, np.ndarray]:
    with np.load(os.path.join(out, "batches.npz")) as f:
        return {k: f[k] for k in f.files}


def test_two_processes_start_from_one_publication(s3_server, local_prefixes, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", ROOT)  # the processes run this checkout's jaxblend
    urls = [s3_server.upload(p, f"pubdump/{os.path.basename(p)}") for p in local_prefixes]
    args = [
        f"--data_path=40 {urls[0]} 60 {urls[1]}", "--split=90,10,0", f"--seq_length={SEQ}",
        "--train_samples=200", "--valid_samples=16", f"--global_batch_size={B}",
        f"--steps={STEPS}", "--storage_retries=1", "--storage_timeout=30",
    ]
    # The old path: one process, a local map store.
    with s3_server.pointed_at():
        reference = subprocess.run(
            [sys.executable, "-m", "jaxblend.tools.dump_batches", *args, "--mesh_shape=4",
             "--num_cpu_devices=4", f"--data_cache_path={tmp_path / 'local_cache'}",
             f"--s3_endpoint={s3_server.url}", f"--out={tmp_path / 'reference'}"],
            capture_output=True, text=True, timeout=600, check=False, cwd=str(tmp_path),
        )
    assert reference.returncode == 0, reference.stderr[-3000:]

    maps_url = s3_server.prefix_url("pubdump/maps")
    proxies = [LoggingProxy(s3_server.url) for _ in range(2)]
    try:
        def job(out: str) -> Job:
            with s3_server.pointed_at():
                return Job(
                    [sys.executable, "-m", "jaxblend.tools.dump_batches", *args, "--mesh_shape=4",
                     f"--data_cache_path={maps_url}", "--data_cache_wait=120",
                     f"--data_cache_mirror={tmp_path}/host{{process_id}}/mirror",
                     f"--out={tmp_path / out}"],
                    2, 2, args_of=lambda i: [f"--s3_endpoint={proxies[i].url}"],
                )

        first = job("published")
        codes = first.wait()
        assert codes == [0, 0], first.dump()
        got, want = _batches(str(tmp_path / "published")), _batches(str(tmp_path / "reference"))
        assert got.keys() == want.keys() and "inputs" in got
        for key in want:
            assert got[key].tobytes() == want[key].tobytes(), key

        builder, host = proxies[0].log, proxies[1].log
        assert any(p.endswith(".idx") for _, p, _ in builder)  # the builder opened the datasets
        assert any("/published/" in p and m == "PUT" for m, p, _ in builder)
        assert not any(".idx" in p for _, p, _ in host), host
        bins = [(m, p, r) for m, p, r in host if p.endswith(".bin")]
        # Existence checks (HEAD, no body) and ranges; never a whole .bin.
        assert any(m == "GET" for m, _, _ in bins), bins
        assert all(m == "HEAD" or (m == "GET" and r) for m, p, r in bins), bins
        assert not any("/identity/" in p for _, p, _ in host), host
        entries = {m.group(1) for _, p, _ in host if (m := re.search(r"/maps/([^/]+)/", p))}
        assert entries and all(e == "published" or e.endswith("-rows") for e in entries), entries
        assert not any(m in ("PUT", "POST", "DELETE") for m, _, _ in host), host  # it wrote nothing

        # A .bin rewritten after publishing: every host refuses to read it.
        data = bytearray(Path(local_prefixes[1] + ".bin").read_bytes())
        data[1] ^= 1
        s3_server.write(f"pubdump/{os.path.basename(local_prefixes[1])}.bin", bytes(data))
        second = job("changed")
        codes = second.wait()
        assert codes[0] != 0 and codes[1] != 0, second.dump()
        for i in range(2):
            out = second.output(i)
            assert f"{urls[1]}.bin" in out and "build_index" in out, out[-3000:]
    finally:
        for proxy in proxies:
            proxy.close()

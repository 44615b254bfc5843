"""The index-map cache at a bucket URL: what a host fetches, and how long publish and fetch take.

Builds the train maps of a weighted blend of three datasets (1e9 tokens by default, S=2048) with
`--data_cache_path` on a local fake-gcs-server (a real process on loopback, tests/
helpers_object_store.py), as process 0 does: build, write the local copy, upload, commit marker.
Then, as another host, it fetches the committed entry into an empty local mirror (download, full
SHA-256 check, rename) and loads it. Reference in the same run: the same maps from a local cache
directory (`cache.load`, summary check), which is what a host with its own cache, or Megatron-Core
on a shared filesystem, reads at start. Prints a markdown table; median of `--repeats`.

  .venv/bin/python benchmarks/bucket_cache.py                 # 1e9 tokens
  .venv/bin/python benchmarks/bucket_cache.py --tokens 1e8
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers_object_store import GcsServer

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import bucket as bucket_cache
from jaxblend.map_store import entries as cache
from jaxblend.map_store import load_or_build_data_maps


def _info(name: str, docs: int, mean: int, seed: int) -> index.DatasetInfo:
    lengths = np.random.default_rng(seed).integers(1, 2 * mean, docs).astype(np.int32)
    digest = hashlib.sha256(lengths[:1000].tobytes() + str(docs).encode()).hexdigest()
    return index.DatasetInfo(name, lengths, np.arange(docs + 1, dtype=np.int64), digest)


def _median(times: list[float]) -> float:
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=1e9)
    parser.add_argument("--docs", type=float, default=1e6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    docs, tokens, seq = int(args.docs), int(args.tokens), 2048
    infos = {f"/d/{k}": _info(f"/d/{k}", docs // 3, tokens // docs, k) for k in range(3)}
    samples = tokens // seq
    with tempfile.TemporaryDirectory() as work:
        server = GcsServer.start(Path(work))
        try:
            with server.pointed_at():
                url = server.prefix_url("bench/index_cache")
                config = index.GPTDataConfig(
                    blend=("0.5", "/d/0", "0.3", "/d/1", "0.2", "/d/2"), split="100,0,0",
                    seq_length=seq, num_samples=(samples, None, None),
                )
                builder = os.path.join(work, "builder")
                access = DataAccess.from_env(
                    maps=MapStoreOptions(location=url, builder=True, mirror=builder)
                )
                store = bucket_cache.Bucket(url, access.object_store)
                t0 = time.perf_counter()
                built = load_or_build_data_maps(config, infos, access)
                build_publish = time.perf_counter() - t0
                local_dir, key = built.cache_path.rsplit("/", 1)
                arrays = os.listdir(built.cache_path)
                total = sum(os.path.getsize(os.path.join(built.cache_path, n)) for n in arrays)
                t0 = time.perf_counter()
                store.publish(key, local_dir)
                publish = time.perf_counter() - t0

                fetch_times, again_times, local_times = [], [], []
                for r in range(args.repeats):
                    mirror = os.path.join(work, f"reader{r}")
                    t0 = time.perf_counter()
                    assert store.fetch(key, mirror)
                    assert cache.load(mirror, key) is not None
                    fetch_times.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()  # a later start: the entry is in the mirror
                    assert store.fetch(key, mirror)
                    assert cache.load(mirror, key) is not None
                    again_times.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    assert cache.load(local_dir, key) is not None
                    local_times.append(time.perf_counter() - t0)
                    shutil.rmtree(mirror)
        finally:
            server.stop()
    fetch, local = _median(fetch_times), _median(local_times)
    print(f"{tokens:.0e} tokens, {samples:,} train samples, S={seq}: entry of "
          f"{len(arrays) - 1} arrays + manifest, {total / 1e6:.1f} MB "
          f"({total / samples:.1f} bytes per sample)\n")
    print("| step | reference (local cache dir) | bucket cache | ratio |")
    print("|---|---|---|---|")
    print(f"| process 0: build + publish (upload, marker last) | - | "
          f"{build_publish:.2f} s (of which a re-upload alone: {publish:.2f} s) | - |")
    print(f"| other host: first start (fetch {total / 1e6:.1f} MB, full check, load) | "
          f"{local * 1e3:.2f} ms | {fetch:.3f} s ({total / 1e6 / fetch:.0f} MB/s) | "
          f"{fetch / local:.0f}x |")
    again = _median(again_times)
    print(f"| other host: later starts (entry in its local mirror, summary checks) | "
          f"{local * 1e3:.2f} ms | {again * 1e3:.2f} ms | {again / local:.1f}x |")


if __name__ == "__main__":
    main()

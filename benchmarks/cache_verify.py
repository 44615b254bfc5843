"""Cost of the index cache's checksums for a 1e10-token plan: write, summary check, full check.

Builds the train maps of a weighted blend of three datasets holding 1e10 tokens in all (1e7
documents, S=2048, about 4.9e6 samples: the size of BENCHMARKS.md's GPT-map case), then times:

* write: `cache.save` (SHA-256 of every array while writing, summary digests, fsync of every
  file and both directories) vs a plain `np.save` of the same arrays (no hash, no fsync);
* load: `cache.load(verify="summary")` (every start) and `verify="full"` (build_index, preflight)
  vs an unverified `np.load(mmap_mode="r")` of every array, which is how Megatron-Core opens its
  cached `.npy` index files. Loads are timed with the files in the page cache (warm).

  .venv/bin/python benchmarks/cache_verify.py             # 1e10 tokens (~1 min, ~2 GB RAM)
  .venv/bin/python benchmarks/cache_verify.py --tokens 1e9
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import statistics
import tempfile
import time

import numpy as np

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import entries as cache
from jaxblend.map_store import load_or_build_data_maps


def _info(name: str, docs: int, mean: int, seed: int) -> index.DatasetInfo:
    lengths = np.random.default_rng(seed).integers(1, 2 * mean, docs).astype(np.int32)
    digest = hashlib.sha256(lengths[:1000].tobytes() + str(docs).encode()).hexdigest()
    return index.DatasetInfo(name, lengths, np.arange(docs + 1, dtype=np.int64), digest)


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=1e10)
    parser.add_argument("--docs", type=float, default=1e7)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    docs, tokens, seq = int(args.docs), int(args.tokens), 2048
    per = docs // 3
    infos = {f"/d/{k}": _info(f"/d/{k}", per, tokens // docs, k) for k in range(3)}
    samples = tokens // seq
    config = index.GPTDataConfig(
        blend=("0.5", "/d/0", "0.3", "/d/1", "0.2", "/d/2"), split="100,0,0",
        seq_length=seq, num_samples=(samples, None, None),
    )
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as root:
        t0 = time.perf_counter()
        plan = load_or_build_data_maps(
            config, infos, DataAccess(maps=MapStoreOptions(location=os.path.join(root, "built")))
        )
        build = time.perf_counter() - t0
        built = cache.load(os.path.dirname(plan.cache_path), os.path.basename(plan.cache_path))
        arrays = {k: np.array(v) for k, v in built[0].items()}
        total = sum(a.nbytes for a in arrays.values())
        num_samples = len(plan.split("train"))

        runs = itertools.count(1)

        def plain_save():
            d = os.path.join(root, f"plain{next(runs)}")
            os.makedirs(d)
            for name, a in arrays.items():
                np.save(os.path.join(d, f"{name}.npy"), a, allow_pickle=False)

        def ours_save():
            cache.save(root, f"entry{next(runs)}", arrays, {"splits": {}})

        write_plain = _median_seconds(plain_save, args.repeats)
        first = next(runs)
        runs = itertools.count(first)
        write_ours = _median_seconds(ours_save, args.repeats)
        entry = os.path.join(root, f"entry{first}")

        def mmap_only():
            for name in arrays:
                np.load(os.path.join(entry, f"{name}.npy"), mmap_mode="r")

        mmap_only()
        load_plain = _median_seconds(mmap_only, args.repeats)
        load_summary = _median_seconds(lambda: cache.load(root, f"entry{first}", "summary"), args.repeats)
        load_full = _median_seconds(lambda: cache.load(root, f"entry{first}", "full"), args.repeats)

    print(f"plan: {tokens:.0e} tokens, {docs:.0e} documents, S={seq}, {num_samples:,} samples; "
          f"maps {total / 1e6:,.0f} MB in {len(arrays)} arrays; build + first save {build:.2f} s")
    print("| step | reference | jaxblend cache | ratio |")
    print("|---|---|---|---|")
    print(f"| write (np.save vs hash + fsync) | {write_plain:.3f} s | {write_ours:.3f} s | "
          f"{write_ours / write_plain:.2f}x |")
    print(f"| load, summary check (every start) | {load_plain * 1e3:.2f} ms | "
          f"{load_summary * 1e3:.2f} ms | {load_summary / load_plain:.1f}x |")
    print(f"| load, full SHA-256 (build_index, preflight) | {load_plain * 1e3:.2f} ms | "
          f"{load_full * 1e3:.1f} ms | {load_full / load_plain:.0f}x "
          f"({total / 1e6 / load_full:,.0f} MB/s) |")


if __name__ == "__main__":
    main()

"""Trillion-token plans: build, cache and cached start of a Megatron-exact plan, per host.

The target is 1e12 tokens in 1e9 documents over 10,000 prefixes, sequence length 4,096 (~244 M
samples). That plan's arrays (~14 GB, twice that while building) do not fit this machine next to
other work, so the plan is built at `--documents` (default 1e8, one tenth) with the same 10,000
prefixes, and every figure is also extrapolated linearly to `--target_documents` (1e9). Each
step runs in its own child process; "peak" is the growth of the child's max RSS over its RSS
after generating the inputs.

  .venv/bin/python benchmarks/trillion_plan.py                    # 1e8 documents, ~1.5 GB peak
  .venv/bin/python benchmarks/trillion_plan.py --documents 1e7    # quick (~1 min)
  .venv/bin/python benchmarks/trillion_plan.py --steps megatron   # only Megatron's side

Synthetic data: per-prefix document counts lognormal (sigma 1, at least 1,000 per prefix),
document lengths lognormal (sigma 1, mean `--mean_length` tokens), one sequence per document;
weights proportional to the prefixes' tokens (the usual "natural" mix); split 969/31/0 (a 1/1000
test split of the smallest prefixes holds less than a sample), train `num_samples` = 95% of
the train tokens / seq_length, so every prefix needs one epoch.

Steps:
  build     `build_data_maps` with an empty cache directory: time, peak RSS, cache bytes.
  load      a fresh process, same inputs, cache hit: time, RSS growth, and one batch's spans.
  megatron  megatron-core's per-dataset helpers (`_build_document_index`,
            `helpers.build_sample_idx`, `_build_shuffle_index`) on `--megatron_prefixes`
            prefixes and its `build_blending_indices` over all prefixes for
            `--blend_positions` positions, jaxblend's same pieces in the same child (ratios).
  hash      blake2b throughput of `IndexedDataset.fingerprint` (the .idx bytes a start hashes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

#: Bytes of a Megatron .idx per document with one sequence each: int32 length, int64 pointer,
#: int64 document boundary (header and mode byte are negligible).
IDX_BYTES_PER_DOCUMENT = 4 + 8 + 8


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def make_infos(prefixes: int, documents: int, mean_length: float, seed: int = 0):
    """Synthetic `DatasetInfo`s: lognormal document counts and lengths (see the module doc)."""
    from jaxblend import index

    rng = np.random.default_rng(seed)
    share = rng.lognormal(0.0, 1.0, prefixes)
    # At least 1,000 documents per prefix, so that every valid split holds samples.
    counts = np.maximum(1000, np.floor(documents * share / share.sum())).astype(np.int64)
    mu = np.log(mean_length) - 0.5  # lognormal mean = exp(mu + sigma**2 / 2)
    lengths = np.clip(rng.lognormal(mu, 1.0, int(counts.sum())), 1, 2**20).astype(np.int32)
    boundaries = np.arange(int(counts.max()) + 1, dtype=np.int64)  # shared view per prefix
    starts = np.concatenate([[0], np.cumsum(counts)])
    infos = {}
    for j in range(prefixes):
        name = f"/synthetic/p{j:05d}"
        infos[name] = index.DatasetInfo(
            name,
            lengths[starts[j] : starts[j + 1]],
            boundaries[: counts[j] + 1],
            f"synthetic-{seed}-{documents}-{j}",
        )
    return infos, lengths


def make_config(infos, lengths: np.ndarray, seq_length: int):
    from jaxblend import index

    blend: list[str] = []
    for name, info in infos.items():
        blend += [repr(float(np.sum(info.sequence_lengths, dtype=np.int64))), name]
    train_tokens = int(np.sum(lengths, dtype=np.int64)) * 969 // 1000
    return index.GPTDataConfig(
        blend=blend,
        split="969,31,0",
        seq_length=seq_length,
        num_samples=(int(0.95 * train_tokens / seq_length), 10_000, None),
    )


def _dir_bytes(path: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files
    )


def _timed_plan(args, rss):
    """Builds (or loads from the cache) the plan of `args`' synthetic datasets.

    Returns:
      (plan, sequence lengths, seconds, `rss()` before the build).
    """
    from jaxblend.access import DataAccess, MapStoreOptions
    from jaxblend.map_store import load_or_build_data_maps

    infos, lengths = make_infos(args.prefixes, args.documents, args.mean_length)
    config = make_config(infos, lengths, args.seq_length)
    access = DataAccess(maps=MapStoreOptions(location=args.cache_dir))
    base = rss()
    t0 = time.perf_counter()
    plan = load_or_build_data_maps(config, infos, access)
    return plan, lengths, time.perf_counter() - t0, base


def step_build(args) -> dict:
    plan, lengths, seconds, base = _timed_plan(args, _rss_mb)
    train = plan.split("train")
    return {
        "seconds": seconds,
        "peak_mb": _rss_mb() - base,
        "cache_bytes": _dir_bytes(plan.cache_path),
        "train_samples": len(train),
        "tokens": int(np.sum(lengths, dtype=np.int64)),
        "documents": len(lengths),
    }


def step_load(args) -> dict:
    plan, _, seconds, base = _timed_plan(args, _current_rss_mb)
    after_load = _current_rss_mb() - base
    train = plan.split("train")
    rows = np.random.default_rng(0).integers(0, len(train), 256)
    t1 = time.perf_counter()
    train.spans(rows[:1])  # loads the compiled kernel
    t2 = time.perf_counter()
    spans = train.spans(rows)
    batch_seconds = time.perf_counter() - t2
    return {
        "seconds": seconds,
        "rss_mb": after_load,
        "kernel_load_seconds": t2 - t1,
        "first_spans_seconds": batch_seconds,
        "rss_after_spans_mb": _current_rss_mb() - base,
        "pieces": len(spans.dataset),
    }


def step_megatron(args) -> dict:
    from megatron.core.datasets import gpt_dataset, helpers

    from jaxblend import index
    from jaxblend.index import gpt

    infos, _ = make_infos(args.prefixes, args.documents, args.mean_length)
    picked = list(infos.values())[:: max(1, args.prefixes // args.megatron_prefixes)]
    # Load the compiled kernels outside the timings (C++ helpers need none).
    warm = picked[0].sequence_lengths[:100]
    gpt.build_gpt_index_maps(warm, np.arange(100, dtype=np.int32), 2, 8, 1)
    index.build_blending_indices(np.random.default_rng(0).random(64) + 0.1, 100)
    ours = theirs = 0.0
    same = True
    for info in picked:
        docs = np.arange(info.num_sequences, dtype=np.int32)
        tokens = int(np.sum(info.sequence_lengths, dtype=np.int64))
        request = int(0.95 * tokens / args.seq_length)
        t0 = time.perf_counter()
        maps = gpt.build_gpt_index_maps(
            info.sequence_lengths, docs, request, args.seq_length, 1234, name=info.name
        )
        t1 = time.perf_counter()
        epochs = gpt.num_epochs_for(tokens, request, args.seq_length, True)
        separate, sans = gpt.separate_final_epoch_for(
            epochs, tokens, request, args.seq_length, True
        )
        rng = np.random.RandomState(1234)
        doc_index = gpt_dataset._build_document_index(docs, epochs, rng, separate)
        sample_index = helpers.build_sample_idx(
            info.sequence_lengths, doc_index, args.seq_length, epochs, tokens, True, True
        )
        n = sample_index.shape[0] - 1
        shuffle = gpt_dataset._build_shuffle_index(sans if separate else n, n, rng)
        t2 = time.perf_counter()
        ours += t1 - t0
        theirs += t2 - t1
        same = same and np.array_equal(maps.sample_index, sample_index)
        same = same and np.array_equal(maps.shuffle_index, shuffle)
    weights = np.array([np.sum(i.sequence_lengths, dtype=np.int64) for i in infos.values()])
    weights = weights / weights.sum()
    size = args.blend_positions
    t0 = time.perf_counter()
    ours_blend = index.build_blending_indices(weights, size)
    t1 = time.perf_counter()
    di = np.zeros(size, dtype=np.int16)
    dsi = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(di, dsi, weights, len(weights), size, False)
    t2 = time.perf_counter()
    same = same and np.array_equal(ours_blend[0], di) and np.array_equal(ours_blend[1], dsi)
    return {
        "prefixes_timed": len(picked),
        "maps_ours": ours,
        "maps_megatron": theirs,
        "blend_ours": t1 - t0,
        "blend_megatron": t2 - t1,
        "identical": bool(same),
    }


def step_hash(args) -> dict:
    data = np.random.default_rng(0).integers(0, 255, 256 * 2**20, dtype=np.uint8).tobytes()
    t0 = time.perf_counter()
    h = hashlib.blake2b(digest_size=16, person=b"jaxblend.idx.v1")
    view = memoryview(data)
    for lo in range(0, len(view), 2**24):
        h.update(view[lo : lo + 2**24])
    return {"bytes_per_second": len(data) / (time.perf_counter() - t0)}


STEPS = {"build": step_build, "load": step_load, "megatron": step_megatron, "hash": step_hash}


def _child(step: str, argv: list[str]) -> dict:
    cmd = [sys.executable, __file__, *argv, "--child", step]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=7200)
    if out.returncode != 0:
        tail = "\n".join(out.stderr.strip().splitlines()[-3:])
        raise SystemExit(f"step {step!r} failed (exit {out.returncode}):\n{tail}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefixes", type=int, default=10_000)
    parser.add_argument("--documents", type=float, default=1e8, help="documents built here")
    parser.add_argument("--target_documents", type=float, default=1e9, help="extrapolated to")
    parser.add_argument("--mean_length", type=float, default=1000.0, help="mean document tokens")
    parser.add_argument("--seq_length", type=int, default=4096)
    parser.add_argument("--megatron_prefixes", type=int, default=100)
    parser.add_argument("--blend_positions", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=256)
    parser.add_argument("--steps", default="build,load,megatron,hash")
    parser.add_argument("--cache_dir", default=None, help="default: a fresh temporary directory")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.documents = int(args.documents)
    if args.child:
        print(json.dumps(STEPS[args.child](args)))
        return
    steps = [s for s in args.steps.split(",") if s]
    for s in steps:
        if s not in STEPS:
            parser.error(f"--steps: {s!r} is not one of {', '.join(STEPS)}")
    own_cache = args.cache_dir is None
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="jaxblend-trillion-")
    argv = [
        f"--prefixes={args.prefixes}",
        f"--documents={args.documents}",
        f"--mean_length={args.mean_length}",
        f"--seq_length={args.seq_length}",
        f"--megatron_prefixes={args.megatron_prefixes}",
        f"--blend_positions={args.blend_positions}",
        f"--cache_dir={cache_dir}",
    ]
    scale = args.target_documents / args.documents
    print(
        f"{args.prefixes} prefixes, {args.documents:.1e} documents built (x{scale:g} to "
        f"{args.target_documents:.0e}), seq {args.seq_length}, {os.cpu_count()} cores (shared)\n"
    )
    results = {}
    try:
        for s in steps:
            results[s] = _child(s, argv)
            print(f"{s}: {json.dumps(results[s])}")
            sys.stdout.flush()
    finally:
        if own_cache:
            shutil.rmtree(cache_dir, ignore_errors=True)
    if "build" in results:
        # Per-prefix minimum counts add documents: extrapolate from the documents built.
        scale = args.target_documents / results["build"]["documents"]
    print(f"\n| measurement | built here | extrapolated x{scale:.3g} |")
    print("|---|---|---|")
    if "build" in results:
        b = results["build"]
        print(f"| documents | {b['documents']:.3e} | {b['documents'] * scale:.3e} |")
        print(
            f"| tokens / train samples | {b['tokens']:.2e} / {b['train_samples']:.3e} | "
            f"{b['tokens'] * scale:.2e} / {b['train_samples'] * scale:.3e} |"
        )
        print(f"| build time (s) | {b['seconds']:.1f} | {b['seconds'] * scale:.0f} |")
        print(
            f"| build peak RSS (GB) | {b['peak_mb'] / 1024:.2f} | {b['peak_mb'] * scale / 1024:.1f} |"
        )
        print(
            f"| cache size (GB) | {b['cache_bytes'] / 1e9:.2f} | {b['cache_bytes'] * scale / 1e9:.1f} |"
        )
    if "load" in results:
        r = results["load"]
        print(
            f"| cached load (s) | {r['seconds']:.3f} | about the same (memory maps; per-prefix work) |"
        )
        print(f"| RSS after cached load (MB) | {r['rss_mb']:.0f} | |")
        print(f"| loading the spans kernel (s) | {r['kernel_load_seconds']:.3f} | same |")
        print(
            f"| first 256-row spans (s) / RSS after (MB) | {r['first_spans_seconds']:.4f} / "
            f"{r['rss_after_spans_mb']:.0f} | |"
        )
    if "megatron" in results:
        m = results["megatron"]
        k = m["prefixes_timed"]
        per = args.prefixes / k
        print(
            f"| per-dataset maps, {k} prefixes: jaxblend / megatron (s) | {m['maps_ours']:.2f} / "
            f"{m['maps_megatron']:.2f} ({m['maps_megatron'] / m['maps_ours']:.2f}x) | all "
            f"{args.prefixes}: {m['maps_ours'] * per * scale:.0f} / "
            f"{m['maps_megatron'] * per * scale:.0f} |"
        )
        if "build" in results:
            positions = results["build"]["train_samples"] * scale
            factor = positions / args.blend_positions
            print(
                f"| blend {args.blend_positions:.0e} x {args.prefixes}: jaxblend / megatron (s) | "
                f"{m['blend_ours']:.2f} / {m['blend_megatron']:.1f} "
                f"({m['blend_megatron'] / m['blend_ours']:.1f}x) | {positions:.2e} positions: "
                f"{m['blend_ours'] * factor:.0f} / {m['blend_megatron'] * factor:.0f} |"
            )
        print(f"| identical to megatron-core | {m['identical']} | |")
    if "hash" in results:
        rate = results["hash"]["bytes_per_second"]
        idx = args.target_documents * IDX_BYTES_PER_DOCUMENT
        print(
            f"| .idx bytes hashed for fingerprints, per host | "
            f"{args.documents * IDX_BYTES_PER_DOCUMENT / 1e9:.1f} GB | {idx / 1e9:.0f} GB: "
            f"{idx / rate:.0f} s at {rate / 1e9:.2f} GB/s, x{args.hosts} hosts = "
            f"{idx * args.hosts / 1e12:.1f} TB read |"
        )


if __name__ == "__main__":
    main()

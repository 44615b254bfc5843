"""Index-map build times and peak memory, jaxblend vs megatron-core's helpers, in one run.

Each case runs in its own child process (peak RSS = that process's max RSS minus its RSS after
imports and input generation). Prints a markdown table.

  .venv/bin/python benchmarks/index_build.py            # quick sizes (~1 min)
  .venv/bin/python benchmarks/index_build.py --full     # issue sizes (~1 min + Megatron's 100 s)
  .venv/bin/python benchmarks/index_build.py --full --cases blend1k --blend_method tree  # older kernel
  .venv/bin/python benchmarks/index_build.py --cases none --blend1k_kinds zipf,random,equal \
      --blend1k_sizes 1e7,1e8 --repeats 2   # 1,000-dataset blends by weight shape (~25 min)

Cases (full sizes): GPT maps for 1e7 documents / 1e10 tokens at S=2048 (Megatron: its
`_build_document_index`, `helpers.build_sample_idx`, `_build_shuffle_index`); blending 1e8 x 3
and 1e8 x 1,000 datasets (`helpers.build_blending_indices` incl. its numpy.zeros outputs);
1e7 x 100,000 datasets (jaxblend only: Megatron stores dataset ids as int16); loading a cached
configuration with `build_data_maps`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

SIZES = {
    "quick": {
        "docs": 1_000_000,
        "tokens": 1_000_000_000,
        "blend3": 10_000_000,
        "blend1k": 1_000_000,
        "blend100k": 300_000,
    },
    "full": {
        "docs": 10_000_000,
        "tokens": 10_000_000_000,
        "blend3": 100_000_000,
        "blend1k": 100_000_000,
        "blend100k": 10_000_000,
    },
}


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).astype(np.int64).tobytes())
    return h.hexdigest()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _lengths(docs: int, tokens: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    mean = tokens // docs
    return rng.integers(1, 2 * mean, docs).astype(np.int32)


#: Weight shapes of the blending cases: "random" (uniform in [0.1, 1.1)), "zipf" (1 / rank),
#: "equal" (all ties) and "lognormal" (sigma 2, heavy-tailed like dataset sizes).
WEIGHT_KINDS = ("random", "zipf", "equal", "lognormal")


def _weights(n: int, kind: str = "random") -> np.ndarray:
    rng = np.random.default_rng(1)
    if kind == "random":
        w = rng.random(n) + 0.1
    elif kind == "zipf":
        w = 1.0 / np.arange(1, n + 1)
    elif kind == "equal":
        w = np.ones(n)
    elif kind == "lognormal":
        w = rng.lognormal(0.0, 2.0, n)
    else:
        raise ValueError(f"weight kind {kind!r}; expected one of {WEIGHT_KINDS}")
    return w / w.sum()


def case_gpt(impl: str, sizes: dict) -> dict:
    lengths = _lengths(sizes["docs"], sizes["tokens"])
    documents = np.arange(len(lengths), dtype=np.int32)
    tokens = int(lengths.sum())
    seq = 2048
    if impl == "megatron":
        from megatron.core.datasets import gpt_dataset, helpers

        build_documents = gpt_dataset._build_document_index
        build_samples = helpers.build_sample_idx
        build_shuffle = gpt_dataset._build_shuffle_index
    else:
        from jaxblend.index import document_index as di
        from jaxblend.index import sample_index as si
        from jaxblend.index import shuffle_index as sh

        build_documents = di.build_document_index
        build_samples = si.build_sample_index
        build_shuffle = sh.build_shuffle_index
        build_samples(lengths[:10], documents[:10], 3, 1, int(lengths[:10].sum()))  # compile
    base = _rss_mb()
    t0 = time.perf_counter()
    rng = np.random.RandomState(1234)
    doc_index = build_documents(documents, 1, rng, False)
    t1 = time.perf_counter()
    sample_index = build_samples(lengths, doc_index, seq, 1, tokens, True, True)
    t2 = time.perf_counter()
    n = sample_index.shape[0] - 1
    shuffle = build_shuffle(n, n, rng)
    t3 = time.perf_counter()
    peak = _rss_mb() - base
    digest = _digest(doc_index, sample_index, shuffle)
    return {
        "seconds": t3 - t0,
        "doc": t1 - t0,
        "sample": t2 - t1,
        "shuffle": t3 - t2,
        "peak_mb": peak,
        "digest": digest,
        "samples": int(n),
    }


def case_blend(impl: str, size: int, n: int, method: str = "auto", kind: str = "random") -> dict:
    w = _weights(n, kind)
    if impl == "megatron":
        from megatron.core.datasets import helpers

        base = _rss_mb()
        c0, t0 = time.process_time(), time.perf_counter()
        dataset_index = np.zeros(size, dtype=np.int16)
        dataset_sample_index = np.zeros(size, dtype=np.int64)
        helpers.build_blending_indices(dataset_index, dataset_sample_index, w, n, size, False)
        c1, t1 = time.process_time(), time.perf_counter()
    else:
        from jaxblend import index

        index.build_blending_indices(w, 10, method=method)
        base = _rss_mb()
        c0, t0 = time.process_time(), time.perf_counter()
        dataset_index, dataset_sample_index = index.build_blending_indices(w, size, method=method)
        c1, t1 = time.process_time(), time.perf_counter()
    peak = _rss_mb() - base
    digest = _digest(dataset_index, dataset_sample_index)
    # CPU seconds (user + system, page faults included) are what other work on shared cores
    # disturbs least; wall seconds are what a user waits.
    return {"seconds": t1 - t0, "cpu_seconds": c1 - c0, "peak_mb": peak, "digest": digest}


def case_cached_load(impl: str, sizes: dict) -> dict:
    from jaxblend import index
    from jaxblend.access import DataAccess, MapStoreOptions
    from jaxblend.map_store import load_or_build_data_maps

    rng = np.random.default_rng(2)
    infos = {
        f"/bench/{k}": index.DatasetInfo(
            f"/bench/{k}",
            rng.integers(1, 2000, 1_000_000).astype(np.int32),
            np.arange(1_000_001, dtype=np.int64),
            f"fingerprint-{k}",
        )
        for k in range(3)
    }
    config = index.GPTDataConfig(
        blend=["30", "/bench/0", "50", "/bench/1", "20", "/bench/2"],
        split="969,30,1",
        seq_length=2048,
        num_samples=(1_000_000, 10_000, 1_000),
    )
    access = DataAccess(maps=MapStoreOptions(location=tempfile.mkdtemp(prefix="jaxblend-bench-")))
    load_or_build_data_maps(config, infos, access)
    base = _rss_mb()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        plan = load_or_build_data_maps(config, infos, access)
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "peak_mb": _rss_mb() - base, "digest": len(plan.split("train"))}


def run_case(name: str, impl: str, mode: str, method: str = "auto") -> dict:
    sizes = SIZES[mode]
    if name == "gpt":
        return case_gpt(impl, sizes)
    if name == "blend3":
        return case_blend(impl, sizes["blend3"], 3, method)
    if name == "blend1k":
        return case_blend(impl, sizes["blend1k"], 1000, method)
    if name == "blend100k":
        return case_blend(impl, sizes["blend100k"], 100_000, method)
    if name.startswith("blend1k:"):
        # blend1k:<weight kind>:<size>, from --blend1k_kinds / --blend1k_sizes.
        _, kind, size = name.split(":")
        return case_blend(impl, int(float(size)), 1000, method, kind)
    if name == "cached":
        return case_cached_load(impl, sizes)
    raise ValueError(name)


def _best(a: dict, b: dict) -> dict:
    """The faster of two runs of one case, wall and CPU seconds taken separately."""
    out = min(a, b, key=lambda r: r["seconds"])
    if "cpu_seconds" in a:
        out = {**out, "cpu_seconds": min(a["cpu_seconds"], b["cpu_seconds"])}
    return out


def _child(name: str, impl: str, mode: str, method: str = "auto") -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--impl", impl, "--mode", mode]
    cmd += ["--blend_method", method]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="issue sizes")
    parser.add_argument(
        "--skip_megatron_1k", action="store_true", help="skip Megatron's 110 s case"
    )
    parser.add_argument(
        "--cases",
        default="gpt,blend3,blend1k,blend100k,cached",
        help="comma-separated subset of the cases",
    )
    parser.add_argument(
        "--blend_method",
        default="auto",
        choices=["auto", "scan", "tree", "block"],
        help="jaxblend's build_blending_indices method for the blending cases",
    )
    parser.add_argument(
        "--blend1k_kinds",
        default="",
        help=f"comma-separated weight kinds ({', '.join(WEIGHT_KINDS)}) for extra 1,000-dataset "
        "blending rows, each at every --blend1k_sizes size, with megatron-core side by side",
    )
    parser.add_argument(
        "--blend1k_sizes", default="1e7,1e8", help="sizes of the --blend1k_kinds rows"
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="alternating runs per case; the best of each side"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--impl", default="jaxblend", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="quick", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case(args.child, args.impl, args.mode, args.blend_method)))
        return
    mode = "full" if args.full else "quick"
    s = SIZES[mode]
    rows = [
        ("gpt", f"GPT maps {s['docs']:.0e} docs / {s['tokens']:.0e} tokens, S=2048", True, None),
        ("blend3", f"blend {s['blend3']:.0e} x 3", True, None),
        ("blend1k", f"blend {s['blend1k']:.0e} x 1,000", not args.skip_megatron_1k, None),
        ("blend100k", f"blend {s['blend100k']:.0e} x 100,000", False, None),
        ("cached", "cached configuration load (3 x 1e6 docs, 1e6 samples)", False, None),
    ]
    cases = [c for c in args.cases.split(",") if c]
    for kind in [k for k in args.blend1k_kinds.split(",") if k]:
        if kind not in WEIGHT_KINDS:
            parser.error(f"--blend1k_kinds: {kind!r} is not one of {', '.join(WEIGHT_KINDS)}")
        for size in args.blend1k_sizes.split(","):
            name = f"blend1k:{kind}:{float(size):.0e}"
            rows.append((name, f"blend {float(size):.0e} x 1,000, {kind} weights", True, None))
            cases.append(name)
    print(
        f"mode: {mode}; blend method: {args.blend_method}; machine: {os.cpu_count()} cores "
        "(shared, figures under load)\n"
    )
    print("| case | jaxblend s | peak MB | megatron-core s | peak MB | speedup | identical |")
    print("|---|---|---|---|---|---|---|")
    for name, title, with_megatron, _ in rows:
        if name not in cases:
            continue
        ours = _child(name, "jaxblend", mode, args.blend_method)
        theirs = _child(name, "megatron", mode) if with_megatron else None
        for _ in range(args.repeats - 1):
            # Alternating repeats, best of each: load from other work hits both sides alike.
            ours = _best(ours, _child(name, "jaxblend", mode, args.blend_method))
            if theirs is not None:
                theirs = _best(theirs, _child(name, "megatron", mode))
        detail = ""
        if "cpu_seconds" in ours:
            detail = f" (CPU {ours['cpu_seconds']:.3f})"
        if name == "gpt":
            detail = f" (doc {ours['doc']:.2f} / sample {ours['sample']:.2f} / shuffle {ours['shuffle']:.2f})"
        if theirs is None:
            print(
                f"| {title} | {ours['seconds']:.4f}{detail} | {ours['peak_mb']:.0f} | n/a | n/a | n/a | n/a |"
            )
        else:
            mdetail = cpu_ratio = ""
            if "cpu_seconds" in theirs:
                mdetail = f" (CPU {theirs['cpu_seconds']:.3f})"
                cpu_ratio = f" (CPU {theirs['cpu_seconds'] / ours['cpu_seconds']:.2f}x)"
            if name == "gpt":
                mdetail = f" (doc {theirs['doc']:.2f} / sample {theirs['sample']:.2f} / shuffle {theirs['shuffle']:.2f})"
            print(
                f"| {title} | {ours['seconds']:.3f}{detail} | {ours['peak_mb']:.0f} | "
                f"{theirs['seconds']:.3f}{mdetail} | {theirs['peak_mb']:.0f} | "
                f"{theirs['seconds'] / ours['seconds']:.2f}x{cpu_ratio} | "
                f"{ours['digest'] == theirs['digest']} |"
            )
        sys.stdout.flush()


if __name__ == "__main__":
    main()

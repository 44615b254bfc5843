"""Build cost of a staged blend (issue 22) vs one blend of the same size, and Megatron's helper.

Three stages over 1,000 datasets (stage 1: 900 datasets for half the samples; stage 2: 100 of
them leave, 100 join, for 40%; stage 3: 50 datasets for the last 10%, an anneal) against one
weighted blend of the same number of samples over the same 1,000 datasets, at several sizes:

* `blend`: jaxblend's `build_blending_indices` of the one blend;
* `staged blend`: `blend_schedule.staged_blend_indices` of the three stages (per-stage greedy
  blending plus the carried per-dataset counters);
* `megatron blend`: Megatron-Core's C++ `helpers_cpp.build_blending_indices` of the one blend
  (output arrays included), up to `--megatron_max` samples (it is O(samples x datasets));
* `plan` / `staged plan`: the whole train split through `build_data_maps` (every dataset's GPT
  maps + the blend) on synthetic datasets of 2x the mean draw per epoch (S = 64: the one blend stays within one epoch
  of each dataset; the anneal stage's 50 datasets wrap into 2-3 epochs).

Each case runs in its own child process (fresh memory). On shared cores the CPU seconds (user +
system of the process) are what other work disturbs least, so the best of `--repeats` runs by CPU
time is reported, with its wall time, CPU ns per sample and, between consecutive sizes, the
log-log slope of the CPU time (1.0 = linear); the ratios are of CPU seconds.

  .venv/bin/python benchmarks/schedule_build.py                  # 1e6, 1e7 (~1-2 min)
  .venv/bin/python benchmarks/schedule_build.py --sizes 1e6,1e7,1e8 --repeats 1   # ~6 min
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import time

import numpy as np

NUM_DATASETS = 1000
SEQ_LENGTH = 64
MEAN_DOCUMENT = 256


def _names() -> list[str]:
    return [f"/bench/{k}" for k in range(NUM_DATASETS)]


def _one_blend() -> np.ndarray:
    rng = np.random.default_rng(1)
    w = rng.random(NUM_DATASETS) + 0.1
    return w / w.sum()


def _schedule(size: int):
    from jaxblend.index import blend_schedule

    rng = np.random.default_rng(2)
    names = _names()

    def stage(start: int, ids, weights):
        blend: list[str] = []
        for i, w in zip(ids, weights):
            blend += [repr(float(w)), names[i]]
        return blend_schedule.BlendStage(start, blend)

    return blend_schedule.BlendSchedule(
        (
            stage(0, range(900), rng.random(900) + 0.1),
            stage(size // 2, range(100, 1000), rng.random(900) + 0.1),
            stage(9 * size // 10, range(0, 1000, 20), rng.random(50) + 0.1),
        )
    )


def _infos(size: int) -> dict:
    from jaxblend import index

    rng = np.random.default_rng(3)
    per_dataset = 2 * size // NUM_DATASETS  # samples per epoch
    docs = max(4, per_dataset * SEQ_LENGTH // MEAN_DOCUMENT)
    out = {}
    for k, name in enumerate(_names()):
        lengths = rng.integers(MEAN_DOCUMENT // 2, 3 * MEAN_DOCUMENT // 2, docs).astype(np.int32)
        out[name] = index.DatasetInfo(
            name, lengths, np.arange(docs + 1, dtype=np.int64), f"bench-{size}-{k}"
        )
    return out


def run_case(case: str, size: int) -> dict:
    """One timed case in this process: seconds (wall) and CPU seconds."""
    from jaxblend import index
    from jaxblend.index import blend_index, blend_schedule

    weights = _one_blend()
    if case == "blend":
        blend_index.build_blending_indices(weights, 1000)  # compile
        start, cpu = time.perf_counter(), time.process_time()
        blend_index.build_blending_indices(weights, size)
    elif case == "staged blend":
        schedule = _schedule(size)
        blend_schedule.staged_blend_indices(blend_schedule.BlendSchedule(schedule.stages[:1]), 1000)
        start, cpu = time.perf_counter(), time.process_time()
        blend_schedule.staged_blend_indices(schedule, size)
    elif case == "megatron blend":
        from megatron.core.datasets import helpers_cpp

        start, cpu = time.perf_counter(), time.process_time()
        dataset_index = np.zeros(size, dtype=np.int16)
        dataset_sample_index = np.zeros(size, dtype=np.int64)
        helpers_cpp.build_blending_indices(
            dataset_index, dataset_sample_index, weights, NUM_DATASETS, size, False
        )
    elif case in ("plan", "staged plan"):
        infos = _infos(size)
        names = _names()
        if case == "plan":
            blend = [x for w, p in zip(weights, names) for x in (repr(float(w)), p)]
            config = index.GPTDataConfig(
                blend_per_split=(blend, None, None), seq_length=SEQ_LENGTH,
                num_samples=(size, None, None),
            )
        else:
            config = index.GPTDataConfig(
                seq_length=SEQ_LENGTH, num_samples=(size, None, None),
                train_schedule=_schedule(size),
            )
        small = index.GPTDataConfig(
            blend_per_split=(names[:20], None, None), seq_length=SEQ_LENGTH,
            num_samples=(100, None, None),
        )
        index.build_data_maps(small, infos)  # compile the kernels
        start, cpu = time.perf_counter(), time.process_time()
        index.build_data_maps(config, infos)
    else:
        raise ValueError(f"unknown case {case!r}")
    return {"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}


def _child(case: str, size: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", case, "--sizes", str(size)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7", help="comma-separated sample counts")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--megatron_max", type=float, default=1e8)
    parser.add_argument(
        "--cases", default="blend,staged blend,megatron blend,plan,staged plan",
        help="comma-separated cases",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    if args.child is not None:
        print(json.dumps(run_case(args.child, sizes[0])))
        return
    cases = [c.strip() for c in args.cases.split(",")]
    if "megatron blend" in cases and importlib.util.find_spec("megatron") is None:
        print("megatron-core is not installed: leaving its case out")
        cases.remove("megatron blend")
    results: dict[tuple[str, int], float] = {}
    print("| case | samples | CPU s (best) | wall s | CPU ns/sample | slope vs previous size |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in cases:
        previous = None
        for size in sizes:
            if case == "megatron blend" and size > args.megatron_max:
                continue
            runs = [_child(case, size) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["cpu_seconds"])
            cpu = best["cpu_seconds"]
            results[case, size] = cpu
            slope = ""
            if previous is not None:
                slope = f"{math.log(cpu / previous[1]) / math.log(size / previous[0]):.2f}"
            print(
                f"| {case} | {size:.0e} | {cpu:.2f} | {best['seconds']:.2f} | "
                f"{1e9 * cpu / size:.1f} | {slope} |",
                flush=True,
            )
            previous = (size, cpu)
    for a, b in (("staged blend", "blend"), ("staged plan", "plan"), ("megatron blend", "blend")):
        ratios = [
            f"{s:.0e}: {results[a, s] / results[b, s]:.2f}x"
            for s in sizes
            if (a, s) in results and (b, s) in results
        ]
        if ratios:
            print(f"{a} / {b}: " + ", ".join(ratios))


if __name__ == "__main__":
    main()

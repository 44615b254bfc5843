"""Where a cached start's time goes: imports, opening datasets, the cached plan, the first batch.

A corpus of `--prefixes` small datasets (default 1,000 x 100 documents, ~1e8 tokens) and its
plan cache are built once under `--data_dir`; then a fresh process (as a training job starts)
times each phase up to its first and second `get_batch` of `--batch` rows at `--seq_length`,
and every Numba kernel the first batch loads from the on-disk cache (or compiles, for kernels
without `cache=True`). Repeated `--repeats` times (fresh processes); the table gives the median.
"process start to first batch" is measured from just before the parent starts the child, so it
includes the interpreter's own start-up; "CPU" is the child's user + system time (every thread),
which a loaded machine inflates much less than wall time.

  .venv/bin/python benchmarks/cached_start.py                  # 1,000 prefixes
  .venv/bin/python benchmarks/cached_start.py --prefixes 100
  .venv/bin/python benchmarks/cached_start.py --numba_warm     # Numba's start-up outside
  .venv/bin/python -X importtime benchmarks/cached_start.py --child start ...   # raw import tree
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile


def _config(args):
    from jaxblend import index

    prefixes = [os.path.join(args.data_dir, f"p{j:05d}") for j in range(args.prefixes)]
    blend: list[str] = []
    for j, p in enumerate(prefixes):
        blend += [str(1.0 + (j % 7)), p]
    return index.GPTDataConfig(
        blend=blend,
        split="100,0,0",
        seq_length=args.seq_length,
        seed=1234,
        num_samples=(args.samples, None, None),
    )


def _access(args):
    from jaxblend.access import DataAccess

    return DataAccess.from_env().with_maps(location=os.path.join(args.data_dir, "cache"))


def prepare(args) -> None:
    """Writes the datasets (once) and builds the plan cache."""
    import numpy as np

    from jaxblend import IndexedDataset, IndexedDatasetBuilder
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    os.makedirs(args.data_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    for j in range(args.prefixes):
        prefix = os.path.join(args.data_dir, f"p{j:05d}")
        if IndexedDataset.exists(prefix):
            continue
        lengths = np.clip(rng.lognormal(6.4, 1.0, args.documents), 8, 65_536).astype(np.int64)
        tokens = rng.integers(0, 50_000, int(lengths.sum()), dtype=np.uint16)
        with IndexedDatasetBuilder(prefix, np.uint16) as builder:
            pos = 0
            for n in lengths:
                builder.add_sequence(tokens[pos : pos + n])
                builder.end_document()
                pos += n
    open_gpt_sources(
        _config(args), GPTSchemaOptions(), access=_access(args)
    )


class _KernelTimer:
    """Times every Numba dispatcher's first call for new argument types (cache load or compile)."""

    def __init__(self) -> None:
        from numba.core import dispatcher

        self.records: list[tuple[str, float]] = []
        original = dispatcher.Dispatcher._compile_for_args
        timer = self

        def timed(self_, *a, **k):
            t = time.perf_counter()
            try:
                return original(self_, *a, **k)
            finally:
                timer.records.append((self_.py_func.__qualname__, time.perf_counter() - t))

        dispatcher.Dispatcher._compile_for_args = timed


# Modules whose presence after the first batch says what the start paid for (Numba's compiler
# target imports scipy.linalg for its BLAS check; a map build imports tqdm).
_WATCHED = ("scipy.linalg", "numpy.f2py", "tqdm", "jax", "grain", "absl.logging")


def start(args) -> dict:
    """The measured fresh start (run as a child)."""
    phases = {}
    t = time.perf_counter()
    phases["python start-up to main"] = t - _T0
    import numpy as np

    phases["import numpy"] = time.perf_counter() - t
    t = time.perf_counter()
    import numba  # noqa: F401

    phases["import numba"] = time.perf_counter() - t
    timer = _KernelTimer()
    if args.numba_warm:
        # What ahead-of-time kernels would remove: Numba's one-time target start-up.
        from numba.core.registry import cpu_target

        t = time.perf_counter()
        cpu_target.target_context.refresh()
        phases["Numba target start-up (--numba_warm)"] = time.perf_counter() - t
    t = time.perf_counter()
    import tensorstore  # noqa: F401

    phases["import tensorstore"] = time.perf_counter() - t
    t = time.perf_counter()
    import jaxblend  # noqa: F401  (the lazy facade: loads nothing)

    phases["import jaxblend (lazy facade)"] = time.perf_counter() - t
    t = time.perf_counter()
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    phases["import jaxblend.sources"] = time.perf_counter() - t
    config = _config(args)
    t = time.perf_counter()
    source = open_gpt_sources(
        config, GPTSchemaOptions(), access=_access(args)
    )["train"]
    phases["open datasets + cached plan"] = time.perf_counter() - t
    ids = np.random.default_rng(1).integers(0, len(source), args.batch)
    t = time.perf_counter()
    source.get_batch(ids)
    phases["first get_batch"] = time.perf_counter() - t
    to_first_batch = time.time() - args.started_at if args.started_at else float("nan")
    first_kernels = list(timer.records)
    loaded = [m for m in _WATCHED if m in sys.modules]
    t = time.perf_counter()
    source.get_batch(ids[::-1].copy())
    phases["second get_batch"] = time.perf_counter() - t
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "phases": phases,
        "kernels": first_kernels,
        "total": time.perf_counter() - _T0,
        "process_to_first_batch": to_first_batch,
        "cpu": usage.ru_utime + usage.ru_stime,
        "loaded": loaded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefixes", type=int, default=1000)
    parser.add_argument("--documents", type=int, default=100, help="documents per prefix")
    parser.add_argument("--seq_length", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument(
        "--numba_warm",
        action="store_true",
        help="start Numba's compiler target before the timed phases (what AOT kernels remove)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--started_at", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.data_dir is None:
        args.data_dir = os.path.join(
            tempfile.gettempdir(), "jaxblend_bench", f"start_{args.prefixes}x{args.documents}"
        )
    if args.child:
        print(json.dumps(start(args)))
        return
    t = time.perf_counter()
    prepare(args)
    print(f"corpus and plan cache ready in {time.perf_counter() - t:.1f} s: {args.data_dir}")
    argv = [
        f"--prefixes={args.prefixes}",
        f"--documents={args.documents}",
        f"--seq_length={args.seq_length}",
        f"--batch={args.batch}",
        f"--samples={args.samples}",
        f"--data_dir={args.data_dir}",
        "--child=start",
    ] + (["--numba_warm"] if args.numba_warm else [])
    if sys.flags.dont_write_bytecode:
        print(
            "note: PYTHONDONTWRITEBYTECODE is set: modules without a cached .pyc are compiled "
            "from source in every child (an installed package has its .pyc files)"
        )
    runs = []
    for _ in range(args.repeats):
        out = subprocess.run(
            [sys.executable, __file__, *argv, f"--started_at={time.time()!r}"],
            check=True,
            capture_output=True,
            text=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"\n{args.prefixes} prefixes, batch {args.batch} x {args.seq_length}, median of "
        f"{len(runs)} fresh processes ({os.cpu_count()} cores, shared)\n"
    )
    print("| phase | seconds |")
    print("|---|---:|")
    for name in runs[0]["phases"]:
        print(f"| {name} | {statistics.median(r['phases'][name] for r in runs):.3f} |")
    print(
        f"| total, process start to second batch | {statistics.median(r['total'] for r in runs):.3f} |"
    )
    print(
        "| **process start (interpreter included) to first batch** | "
        f"{statistics.median(r['process_to_first_batch'] for r in runs):.3f} |"
    )
    print(
        f"| CPU seconds of the child (user + system) | {statistics.median(r['cpu'] for r in runs):.3f} |"
    )
    after_import = [
        r["phases"]["open datasets + cached plan"] + r["phases"]["first get_batch"] for r in runs
    ]
    print(
        f"| **after import: open + cached plan + first batch** | {statistics.median(after_import):.3f} |"
    )
    print(
        "\nNumba kernels loaded (or compiled) while opening and reading the first batch, in call order:\n"
    )
    print("| kernel | seconds |")
    print("|---|---:|")
    for k, (name, _) in enumerate(runs[0]["kernels"]):
        secs = statistics.median(r["kernels"][k][1] for r in runs if len(r["kernels"]) > k)
        print(f"| {name} | {secs:.3f} |")
    print(
        f"\nLoaded by the first batch: {', '.join(runs[0]['loaded']) or 'none'} (of {', '.join(_WATCHED)})"
    )


if __name__ == "__main__":
    main()

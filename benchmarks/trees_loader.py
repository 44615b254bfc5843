"""The loader's step loop on two source trees, side by side: local files, reads in threads.

  /work/main/.venv/bin/python benchmarks/trees_loader.py --trees=/work/main,. --rounds=6

For each round and each tree (alternating, so both see the same load), a child process with
`PYTHONPATH=<tree>` runs `make_loader` over one local dataset (`benchmarks/loader_throughput.py`'s
generator; seq 512, B 64, 8 CPU devices, `worker_count` 0, the fixed read-ahead the defaults give
local files) for `--steps` steps after 4 untimed ones, a fast loop (the batch blocked on, nothing
else), and prints tokens/s and the CPU time of the process per step (user + system, all its
threads: steadier than wall time on a loaded machine). The parent prints the medians and ranges
per tree and the ratios of the second tree to the first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SEQ, BATCH, TOKENS = 512, 64, 20_000_000


def child(data_dir: str, steps: int) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import time

    import jax
    from jax.sharding import Mesh

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    from loader_throughput import build_dataset

    from jaxblend import index
    from jaxblend.access import DataAccess
    from jaxblend.loading import make_loader
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    prefix = os.path.join(data_dir, f"loader_{TOKENS}")
    build_dataset(prefix, TOKENS)
    config = index.GPTDataConfig(blend=[prefix], split="100,0,0", seq_length=SEQ, seed=1234,
                                 num_samples=((TOKENS - 1) // SEQ, None, None))
    access = DataAccess.from_env().with_maps(location=os.path.join(data_dir, "cache"))
    source = open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]
    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("data",))
    with make_loader(source, mesh, global_batch_size=BATCH, num_steps=steps + 8) as loader:
        for _ in range(4):  # compilation, page cache
            jax.block_until_ready(next(loader))
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            jax.block_until_ready(next(loader))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(json.dumps({"tokens/s": steps * BATCH * SEQ / wall, "cpu ms/step": 1e3 * cpu / steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default="/work/main,.", help="two source trees, comma-separated")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(), "jaxblend_bench"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.data_dir, args.steps)
        return
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    os.makedirs(args.data_dir, exist_ok=True)
    figures: dict[str, list[dict]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", f"--steps={args.steps}",
                 f"--data_dir={args.data_dir}"],
                env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True, check=True,
            )
            figures[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("| tree | M tokens/s, median (range) | CPU ms/step, median (range) |")
    print("|---|---:|---:|")
    medians = {}
    for tree, runs in figures.items():
        tps = [r["tokens/s"] / 1e6 for r in runs]
        cpu = [r["cpu ms/step"] for r in runs]
        medians[tree] = (statistics.median(tps), statistics.median(cpu))
        print(f"| {tree} | {medians[tree][0]:.2f} ({min(tps):.2f}-{max(tps):.2f}) | "
              f"{medians[tree][1]:.1f} ({min(cpu):.1f}-{max(cpu):.1f}) |")
    (a_tps, a_cpu), (b_tps, b_cpu) = medians[trees[0]], medians[trees[1]]
    print(f"second / first: tokens/s {b_tps / a_tps:.2f}x, CPU per step {b_cpu / a_cpu:.2f}x")


if __name__ == "__main__":
    main()

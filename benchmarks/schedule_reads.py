"""Steady reads of a staged train split (issue 22) vs one weighted blend of the same datasets.

Both sources are opened over the same datasets, sequence length and number of samples: `blend`
is today's weighted blend (`--data_path`), `staged` a three-stage schedule (half the samples on
every dataset, 40% with a quarter of them left out and weights reversed, the last 10% on four
datasets, an anneal). A round times `get_batch` of random batches of each, in
alternating order, `--rounds` times; the table gives the median tokens/s of each side and their
ratio per round. The same sample ids are read on both sides (a staged sample's pieces come from
the same read kernel; only which dataset sample an id means differs).

  .venv/bin/python benchmarks/schedule_reads.py                 # 16 x 8 M tokens, ~1 min
  .venv/bin/python benchmarks/schedule_reads.py --datasets 64 --tokens_per_dataset 4000000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
from absl import flags as absl_flags

absl_flags.FLAGS.mark_as_parsed()


def build_datasets(data_dir: str, count: int, tokens: int) -> list[str]:
    """`count` lognormal-document datasets of about `tokens` tokens each (kept between runs)."""
    from loader_throughput import build_dataset

    prefixes = []
    for j in range(count):
        prefix = os.path.join(data_dir, f"sched_{tokens}_{j}")
        build_dataset(prefix, tokens, seed=j)
        prefixes.append(prefix)
    return prefixes


def configs(prefixes: list[str], seq: int, samples: int):
    """(one weighted blend, the three-stage schedule) over `prefixes`, `samples` train samples."""
    from jaxblend import index

    weights = [str(1 + j) for j in range(len(prefixes))]
    blend = [x for w, p in zip(weights, prefixes, strict=True) for x in (w, p)]
    quarter = len(prefixes) // 4
    middle = [x for w, p in zip(reversed(weights), prefixes, strict=True) for x in (w, p)][
        2 * quarter :
    ]
    anneal = [x for p in prefixes[:4] for x in ("1", p)]
    schedule = index.BlendSchedule(
        (
            index.BlendStage(0, tuple(blend)),
            index.BlendStage(samples // 2, tuple(middle)),
            index.BlendStage(samples * 9 // 10, tuple(anneal)),
        )
    )
    common = {"seq_length": seq, "seed": 1234, "num_samples": (samples, None, None)}
    plain = index.GPTDataConfig(blend=blend, split="100,0,0", **common)
    staged = index.GPTDataConfig(train_schedule=schedule, **common)
    return plain, staged


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(), "jaxblend_bench"))
    parser.add_argument("--datasets", type=int, default=16)
    parser.add_argument("--tokens_per_dataset", type=int, default=8_000_000)
    parser.add_argument("--seq_length", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per side and round")
    args = parser.parse_args()

    from jaxblend.access import DataAccess
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    os.makedirs(args.data_dir, exist_ok=True)
    prefixes = build_datasets(args.data_dir, args.datasets, args.tokens_per_dataset)
    total_samples = args.datasets * args.tokens_per_dataset // args.seq_length
    plain, staged = configs(prefixes, args.seq_length, total_samples // 2)
    access = DataAccess.from_env().with_maps(location=os.path.join(args.data_dir, "cache"))
    options = GPTSchemaOptions()
    sources = {
        name: open_gpt_sources(config, options, access=access)["train"]
        for name, config in (("blend", plain), ("staged", staged))
    }
    rng = np.random.default_rng(0)
    n = min(len(s) for s in sources.values())
    batches = [rng.integers(0, n, args.batch) for _ in range(64)]
    for source in sources.values():  # compile, warm the page cache
        for ids in batches:
            source.get_batch(ids)

    def rate(source) -> float:
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            source.get_batch(batches[calls % len(batches)])
            calls += 1
        return calls * args.batch * args.seq_length / (time.perf_counter() - start)

    figures: dict[str, list[float]] = {"blend": [], "staged": []}
    for r in range(args.rounds):
        order = ("blend", "staged") if r % 2 == 0 else ("staged", "blend")
        for name in order:
            figures[name].append(rate(sources[name]))
    ratios = [s / b for s, b in zip(figures["staged"], figures["blend"], strict=True)]
    print(
        f"\n{args.datasets} datasets x {args.tokens_per_dataset / 1e6:g} M tokens, seq "
        f"{args.seq_length}, batch {args.batch}, {total_samples // 2} train samples, "
        f"{args.rounds} alternating rounds of {args.seconds:g} s\n"
    )
    print("| source | median M tokens/s | min | max |")
    print("|---|---:|---:|---:|")
    for name, values in figures.items():
        print(
            f"| {name} | {statistics.median(values) / 1e6:.1f} | {min(values) / 1e6:.1f} | "
            f"{max(values) / 1e6:.1f} |"
        )
    print(
        f"\nstaged / blend, per round: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()

"""A one-step `dump_batches` on a bucket corpus, old tree vs new: time to exit, reads, same bytes.

  /work/main/.venv/bin/python benchmarks/dump_start.py --old_tree /work/prev-dumpn \
      --new_tree /work/wt-dumpn --size 1e8:1000 --repeats 5

The corpus and the bucket are benchmarks/pod_start.py's (`_pod_bucket`: written and uploaded once
under `--data_dir`, then reused), reached through the same 20 ms counting proxy
(`_counting_proxy`). Each side first publishes its plan once (`build_index` to a cache URL of its
own) and runs one untimed dump (Numba's on-disk cache of a fresh checkout, the page cache), then
`dump_batches --steps=1` runs `--repeats` times per side, the sides alternating, each run a fresh
host (`_pod_child`: empty identity memo, map mirror, XDG cache and TMPDIR). Per run:
seconds from process start to the first batch (the child's `POD_FIRST_BATCH` line) and to exit
(`os.wait4`), the process's CPU seconds (user + system, steadier than wall time on a shared
machine), requests and bytes through the proxy over the whole run, and the SHA-256 of the
dumped batch (both sides must give the same bytes). The report gives each figure's median and
range per side and the new / old ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _counting_proxy import CountingProxy
from pod_start import Child, batches_digest

CHILD = str(HERE / "_pod_child.py")
FIGURES = (("first_s", "first batch s"), ("exit_s", "exit s"), ("cpu_s", "CPU s"),
           ("requests", "requests"),
           ("read_mb", "read MB"), ("bin_mb", ".bin MB"))


def _env(server, proxy: CountingProxy, tree: str, state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXBLEND_", "XLA_"))}
    env.update(server.environ(proxy.url))
    env.update(PYTHONPATH=tree, JAX_PLATFORMS="cpu", POD_CHILD_STATE=str(state),
               PYTHONUNBUFFERED="1")
    return env


def _run(args, server, proxy, tree: str, module_args: list[str], scratch: Path) -> dict:
    """One fresh-host process; its figures (the batch's digest for a dump)."""
    work = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    proxy.reset()
    before = _children_cpu()
    child = Child([args.python, CHILD, *module_args], _env(server, proxy, tree, work / "state"),
                  str(work), proxy, work / "output.log")
    code, _ = child.wait(args.timeout)
    ended = time.time()
    cpu = _children_cpu() - before  # the child's, reaped by `wait`
    counts = proxy.counts()
    if code != 0 or child.imports != [str(Path(tree).resolve() / "jaxblend")]:
        raise SystemExit(f"{module_args[0]} in {tree}: exit {code}, imported {child.imports}; "
                         f"see {work}/output.log\n{child.tail()}")
    result = {
        "exit_s": ended - child.started, "cpu_s": cpu, "requests": counts.requests,
        "read_mb": counts.body_bytes / 1e6, "bin_mb": counts.bin_bytes / 1e6,
        "first_s": max(t for t, _, _ in child.first_batches) - child.started
        if child.first_batches else None,
        "batch_sha256": batches_digest(work / "out" / "batches.npz"),
    }
    shutil.rmtree(work / "state", ignore_errors=True)
    return result


def _children_cpu() -> float:
    """User + system CPU seconds of this process's ended and reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def report(results: dict) -> str:
    """The markdown table of a results dict."""
    sides = results["sides"]
    runs_all = [r for side in sides.values() for r in side["runs"]]
    figures = [(k, t) for k, t in FIGURES if all(r.get(k) is not None for r in runs_all)]
    title = (
        f"{results['size']} ({results['prefixes']:,} prefixes), {results['delay_ms']:g} ms per "
        f"request, {results['repeats']} runs per side alternating; load average at start "
        f"{results['load_start']:.1f}, at end {results['load_end']:.1f}; old = "
        f"{sides['old']['tree']} ({sides['old']['commit']}), new = {sides['new']['tree']} "
        f"({sides['new']['commit']})."
    )
    lines = [
        title,
        "",
        "| side | " + " | ".join(f"{t} (median, range)" for _, t in figures) + " | batch SHA-256 |",
        "|---|" + "---:|" * len(figures) + "---|",
    ]
    for side in ("old", "new"):
        runs = sides[side]["runs"]
        cells = [f"{_median(runs, k):,.2f} ({min(r[k] for r in runs):,.2f}-"
                 f"{max(r[k] for r in runs):,.2f})" for k, _ in figures]
        digests = sorted({r["batch_sha256"][:12] for r in runs})
        lines.append(f"| {side} | " + " | ".join(cells) + f" | {', '.join(digests)} |")
    ratios = [f"{_median(sides['new']['runs'], k) / _median(sides['old']['runs'], k):.3f}x"
              for k, _ in figures]
    lines.append("| new / old | " + " | ".join(ratios) + " | |")
    same = {r["batch_sha256"] for s in sides.values() for r in s["runs"]}
    lines += ["", "Same batch bytes on every run of both sides: "
              + ("yes" if len(same) == 1 else f"NO ({len(same)} digests)")]
    return "\n".join(lines)


def _commit(tree: str) -> str:
    import subprocess

    done = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], text=True,
                          capture_output=True, check=False)
    return done.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old_tree", default="/work/prev-dumpn")
    parser.add_argument("--new_tree", default="/work/wt-dumpn")
    parser.add_argument("--size", default="1e8:1000", help="tokens:prefixes of the corpus")
    parser.add_argument("--repeats", type=int, default=5, help="one-step dumps per side")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--data_dir", default="/work/bench-data")
    parser.add_argument("--delay_ms", type=float, default=20.0)
    parser.add_argument("--seq_length", type=int, default=2048)
    parser.add_argument("--global_batch_size", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=600.0, help="per process, seconds")
    parser.add_argument("--report", default=None, help="only print the report of this JSON")
    args = parser.parse_args()
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
    from _pod_bucket import DiskGcsServer, corpus_key, local_corpus, upload_corpus

    tokens, prefixes = (int(float(x)) for x in args.size.split(":"))
    data_dir, key = Path(args.data_dir), corpus_key(tokens, prefixes)
    local = local_corpus(data_dir, tokens, prefixes)
    root = data_dir / f"gcs-{key}"
    run_id = time.strftime("%Y%m%d-%H%M%S")
    scratch = Path(tempfile.mkdtemp(prefix=f"dump_start-{run_id}-", dir=data_dir))
    trees = {"old": os.path.realpath(args.old_tree), "new": os.path.realpath(args.new_tree)}
    results = {"size": key, "prefixes": prefixes, "delay_ms": args.delay_ms,
               "repeats": args.repeats, "load_start": os.getloadavg()[0],
               "sides": {s: {"tree": t, "commit": _commit(t), "runs": []} for s, t in trees.items()}}
    server = DiskGcsServer.start_on_disk(root)
    try:
        urls = upload_corpus(server, root, local, f"corpus-{key}")
        blend = scratch / "blend.txt"
        blend.write_text("\n".join(f"1 {u}" for u in urls) + "\n")

        def data_flags(side: str) -> list[str]:
            cache = server.prefix_url(f"runs/dump_start-{run_id}/{side}/cache")
            return [f"--data_args_path={blend}", "--split=99,1,0",
                    f"--seq_length={args.seq_length}",
                    f"--train_samples={int(100 * args.global_batch_size * 1.1)}",
                    f"--valid_samples={args.global_batch_size}", "--test_samples=0",
                    f"--data_cache_path={cache}"]

        def dump_flags(side: str) -> list[str]:
            return ["jaxblend.tools.dump_batches", *data_flags(side),
                    f"--global_batch_size={args.global_batch_size}", "--steps=1", "--out=out"]

        with CountingProxy(server.url, args.delay_ms / 1000) as proxy:
            for side, tree in trees.items():
                print(f"{side}: build_index", flush=True)
                _run(args, server, proxy, tree, ["jaxblend.tools.build_index", *data_flags(side)],
                     scratch)
            for side, tree in trees.items():  # untimed: Numba's cache, the page cache
                print(f"{side}: warm-up dump", flush=True)
                _run(args, server, proxy, tree, dump_flags(side), scratch)
            for i in range(args.repeats):
                for side, tree in trees.items():
                    run = _run(args, server, proxy, tree, dump_flags(side), scratch)
                    results["sides"][side]["runs"].append(run)
                    print(f"  run {i + 1} {side}: " + ", ".join(
                        f"{k} {run[k]:.2f}" for k, _ in FIGURES), flush=True)
    finally:
        server.stop()
    results["load_end"] = os.getloadavg()[0]
    out = data_dir / f"dump_start-{run_id}.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"\nresults: {out}\n\n{report(results)}")


if __name__ == "__main__":
    main()

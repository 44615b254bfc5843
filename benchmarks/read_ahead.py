"""Fixed vs adaptive read-ahead from a bucket: the loader's wait fraction and read-ahead memory.

  .venv/bin/python benchmarks/read_ahead.py              # 0, 20, 100 ms per request, ~5 min
  .venv/bin/python benchmarks/read_ahead.py --quick       # fewer steps

`--prefixes` datasets (long lognormal documents, uint16) are uploaded to fake-gcs-server and read
through `ProxyProcess` (tests/helpers_fault_proxy.py), which adds `--delays` ms to every request.
For each delay, each consumer and each read-ahead mode, one loader runs `--steps` global batches
(B `--batch`, sequence `--seq`) on one CPU device, after one untimed run (imports, compilation):

* consumer "fast": spends `--fast_ms` ms per step (a short training step) before taking the next;
* consumer "slow": spends `--step_ms` ms per step;
* read-ahead "fixed": `adaptive_read_ahead=False` (the fixed 8 steps from a bucket);
* read-ahead "adaptive": the default for a bucket (starts at 8 steps, doubles on trial while the
  loader waits and its reads are behind, shrinks while it does not; up to `--max_read_ahead`
  steps within `--memory_mb` and the requests that fit in flight), read in a `ReadPool` with as
  many reader threads as the window holds steps.

The defaults make a step a few requests (one dataset, documents longer than a row), so that the
latency added per request, not the request rate of the local server and relay (a few hundred
requests/s on a loaded 2-core machine, far below a real bucket's), is what limits the reads.

Reported (from `loader.metrics()`): the wait fraction (time in `next()` / wall time of the run),
tokens/s, the largest number of steps read ahead of the loader at once and the memory they held
(x the bytes of a step's record), the mean number of steps read ahead over the second half of the
run and their memory, the final adaptive window, the reader threads alive (Grain's for fixed,
the `ReadPool`'s for adaptive: the most at once and the mean over the second half), requests per
step and the CPU time of the process per step (user + system, all its threads: steadier than
wall time on a loaded machine). Prints a markdown table with the median and the range of the
wait fraction and tokens/s, and the run's duration.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

os.environ.setdefault("JAX_PLATFORMS", "cpu")
from _corpus import write_corpus
from absl import flags as absl_flags

absl_flags.FLAGS.mark_as_parsed()


def upload(server, prefixes: list[str]) -> list[str]:
    with server.pointed_at():
        kv = server.kvstore()
        futures = [kv.write(f"ra/{Path(p).name}{s}", Path(p + s).read_bytes())
                   for p in prefixes for s in (".idx", ".bin")]
        for f in futures:
            f.result()
    return [server.prefix_url(f"ra/{Path(p).name}") for p in prefixes]


def run(urls, work: Path, args, adaptive: bool, step_ms: float) -> dict:
    import jax

    from jaxblend import index
    from jaxblend.access import DataAccess
    from jaxblend.loading import PrefetchOptions, TelemetryOptions, make_loader
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    blend = [x for u in urls for x in ("1", u)]
    config = index.GPTDataConfig(blend=blend, split="100,0,0", seq_length=args.seq, seed=7,
                                 num_samples=(args.batch * args.steps, None, None))
    access = DataAccess.from_env().with_maps(location=str(work / "cache"))
    source = open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]
    prefetch = PrefetchOptions(adaptive_read_ahead=adaptive, max_read_ahead=args.max_read_ahead,
                               read_ahead_memory=args.memory_mb << 20)
    mesh = jax.make_mesh((1,), ("data",))
    loader = make_loader(source, mesh, global_batch_size=args.batch, num_steps=args.steps,
                         prefetch=prefetch, telemetry=TelemetryOptions(stall_threshold=0))
    assert loader.prefetch.adapts(source.reads_remote) == adaptive
    for _ in range(500):  # the readers of the run before have left
        if not _readers():
            break
        time.sleep(0.01)
    began, cpu = loader.metrics(), time.process_time()
    ahead, windows, readers = [], [], []
    for batch in loader:
        jax.block_until_ready(batch)
        if step_ms:
            time.sleep(step_ms / 1000)
        now = loader.metrics()
        ahead.append(now.read_ahead_steps)
        windows.append(now.read_ahead_window)
        readers.append(_readers())
    m = loader.metrics().since(began)
    cpu = time.process_time() - cpu
    steady = float(np.mean(ahead[len(ahead) // 2:]))
    loader.close()
    if adaptive and args.trajectory:
        print("window every 4 steps:", windows[::4], flush=True)
    return {
        "wait": m.wait_seconds / m.elapsed_seconds, "tokens/s": m.tokens / m.elapsed_seconds,
        "cpu ms/step": 1e3 * cpu / m.steps,
        "peak steps": m.read_ahead_peak_steps, "steady steps": steady,
        "steady MB": steady * m.step_bytes / 1e6,
        "peak MB": m.read_ahead_peak_steps * m.step_bytes / 1e6,
        "window": m.read_ahead_window, "readers": max(readers),
        "steady readers": float(np.mean(readers[len(readers) // 2:])),
        "p50 ms": 1e3 * (m.stores["gs"].latency_p50 or 0),
        "requests/step": sum(s.requests for s in m.stores.values()) / m.steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefixes", type=int, default=1)
    parser.add_argument("--tokens", type=float, default=2e7)
    parser.add_argument("--doc_log_length", type=float, default=10.0,
                        help="documents are lognormal(this, 1) tokens long")
    parser.add_argument("--delays", default="0,20,100", help="ms added per request")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--step_ms", type=float, default=100.0, help="the slow consumer's step")
    parser.add_argument("--fast_ms", type=float, default=5.0, help="the fast consumer's step")
    parser.add_argument("--trajectory", action="store_true", help="print the adaptive window")
    parser.add_argument("--consumers", default="fast,slow", help="fast, slow or both")
    parser.add_argument("--memory_mb", type=int, default=1024)
    parser.add_argument("--max_read_ahead", type=int, default=32, help="the adaptive window's")
    parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "jaxblend_ra"))
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each fast case, fixed and adaptive alternating; medians")
    parser.add_argument("--slow_repeats", type=int, default=1,
                        help="runs of each slow case (its figures vary little between runs)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.delays = 60, "0,100"
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    os.environ["JAXBLEND_IDENTITY_CACHE"] = str(work / "memo")
    from helpers_fault_proxy import ProxyProcess
    from helpers_object_store import GcsServer

    prefixes = write_corpus(work / f"corpus_{args.doc_log_length:g}", args.prefixes,
                            int(args.tokens), mean_log_length=args.doc_log_length)
    server = GcsServer.start(work)
    rows = []
    began, start_load = time.monotonic(), os.getloadavg()[0]
    try:
        urls = upload(server, prefixes)
        with server.pointed_at():
            run(urls, work, args, True, 0.0)  # untimed: imports, compilation, the index maps
        for delay in (float(d) for d in args.delays.split(",")):
            with ProxyProcess(server.url, delay / 1000) as proxy, server.pointed_at(proxy.url):
                consumers = {"fast": args.fast_ms, "slow": args.step_ms}
                for consumer in args.consumers.split(","):
                    step_ms = consumers[consumer]
                    runs: dict[str, list[dict]] = {"fixed": [], "adaptive": []}
                    repeats = args.repeats if consumer == "fast" else args.slow_repeats
                    for r in range(repeats):
                        for mode in (("fixed", "adaptive") if r % 2 == 0 else ("adaptive", "fixed")):
                            row = run(urls, work, args, mode == "adaptive", step_ms)
                            runs[mode].append(row)
                            print({"delay": delay, "consumer": consumer, "mode": mode,
                                   **{k: round(v, 3) if isinstance(v, float) else v
                                      for k, v in row.items()}}, flush=True)
                    for mode, done in runs.items():
                        row = {k: _median([d[k] for d in done]) for k in done[0]}
                        row.update(delay=delay, consumer=consumer, mode=mode,
                                   waits=[d["wait"] for d in done],
                                   rates=[d["tokens/s"] for d in done])
                        rows.append(row)
    finally:
        server.stop()
    load = os.getloadavg()[0]
    print(f"\n{args.prefixes} prefixes on fake-gcs-server, B {args.batch} x {args.seq} tokens, "
          f"{args.steps} steps, medians of {args.repeats} (slow: {args.slow_repeats}), "
          f"fast consumer {args.fast_ms:g} ms/step, slow {args.step_ms:g} ms/step, "
          f"memory bound {args.memory_mb} MB, "
          f"max_read_ahead {args.max_read_ahead}, {os.cpu_count()} cores; "
          f"{time.monotonic() - began:.0f} s, load average {start_load:.1f} at the start and "
          f"{load:.1f} at the end\n")
    print("| ms/request | consumer | read-ahead | wait fraction (range) | M tokens/s (range) | "
          "adaptive / fixed tokens/s | most steps ahead | their memory MB | "
          "steps ahead, 2nd half (mean) | their memory MB | final window | reader threads: most, "
          "2nd half (mean) | "
          "request p50 ms | requests/step | CPU ms/step |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    fixed_rate = {}
    for r in rows:
        key = (r["delay"], r["consumer"])
        if r["mode"] == "fixed":
            fixed_rate[key] = r["tokens/s"]
        ratio = f"{r['tokens/s'] / fixed_rate[key]:.2f}x" if r["mode"] == "adaptive" else ""
        window = "" if r["window"] is None else r["window"]
        print(f"| {r['delay']:g} | {r['consumer']} | {r['mode']} | {r['wait']:.3f} "
              f"({min(r['waits']):.2f}-{max(r['waits']):.2f}) | {r['tokens/s'] / 1e6:.2f} "
              f"({min(r['rates']) / 1e6:.2f}-{max(r['rates']) / 1e6:.2f}) | {ratio} | "
              f"{r['peak steps']} | {r['peak MB']:.2f} | {r['steady steps']:.1f} | "
              f"{r['steady MB']:.2f} | {window} | {r['readers']}, {r['steady readers']:.1f} | "
              f"{r['p50 ms']:.0f} | "
              f"{r['requests/step']:.1f} | {r['cpu ms/step']:.1f} |")


def _readers() -> int:
    """Live reader threads: Grain's (fixed read-ahead) and the `ReadPool`'s (adaptive)."""
    return sum(t.name.startswith(("grain-prefetch", "jaxblend-read"))
               for t in threading.enumerate())


def _median(values: list):
    if values[0] is None:
        return None
    return sorted(values)[len(values) // 2]


if __name__ == "__main__":
    main()

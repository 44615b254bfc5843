"""Reading a 1,000-prefix blend from buckets: fake-gcs-server and moto S3 behind a latency proxy.

  .venv/bin/python benchmarks/object_store.py                   # 1,000 prefixes, ~1e9 tokens
  .venv/bin/python benchmarks/object_store.py --quick           # 100 prefixes, ~5e7 tokens

A corpus of `--prefixes` datasets (lognormal document lengths, uint16) is written locally once
(`--work_dir`), uploaded to both servers (real processes on loopback, see
tests/helpers_object_store.py), and read through `ProxyProcess` (tests/helpers_fault_proxy.py: an
asyncio byte relay in a process of its own), which adds `--delays` ms to every request. For each server and delay:

* open, uncached: `open_gpt_sources` with an empty index-map cache and an empty identity memo
  (every `.idx` is downloaded, validated and hashed; the maps are built);
* open, cached: the same again (maps from the cache, fingerprints from the memo: two tiny
  requests per prefix, no `.idx` download);
* first batch: `get_batch` of global step 0 right after the cached open (B 256, seq 2,048), which
  fetches the `.idx` of the datasets it touches;
* steady: `make_loader` on one CPU device with read-ahead `--read_ahead`, global batches
  `--warmup` .. `--warmup + --steps`, tokens/s and proxy requests per batch;
* Megatron-Core's object-storage reader (S3 only): its `IndexedDataset(s3://..., mmap=False,
  object_storage_config=ObjectStorageConfig(...))` with boto3 pointed at the same proxy, reading
  the same spans of the same global batch the way `GPTDataset.__getitem__` does (one `get` per
  document piece), for its default 256 MiB chunk cache and for 1 MiB chunks.

Also measured: each server's own request rate (concurrent 4 KiB range reads straight to it, no
proxy) and the proxy's at 0 ms, the ceilings of this 2-core machine. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
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

SEQ, B = 2048, 256


def upload(server, prefixes: list[str]) -> list[str]:
    """Uploads every prefix concurrently; returns the bucket URLs."""
    with server.pointed_at():
        kv = server.kvstore()
        futures = []
        for p in prefixes:
            for suffix in (".idx", ".bin"):
                futures.append(kv.write(f"corpus/{Path(p).name}{suffix}", Path(p + suffix).read_bytes()))
                if len(futures) >= 64:
                    futures.pop(0).result()
        for f in futures:
            f.result()
    return [server.prefix_url(f"corpus/{Path(p).name}") for p in prefixes]


def config(urls: list[str], steps: int):
    from jaxblend import index

    rng = np.random.default_rng(1)
    weights = rng.permutation(1.0 / np.sqrt(np.arange(1, len(urls) + 1)))  # Zipf-like, s = 0.5
    blend = [x for w, u in zip(weights, urls) for x in (repr(float(w)), u)]
    return index.GPTDataConfig(blend=blend, split="100,0,0", seq_length=SEQ, seed=1234,
                               num_samples=(B * steps, None, None))


class _Direct:
    """Stands in for the proxy when the client talks to the server itself (no request count)."""

    requests = float("nan")

    def __init__(self, url: str):
        self.url = url

    def reset(self) -> None:
        return


def measure_jaxblend(urls, proxy, work: Path, args) -> dict:
    import jax

    from jaxblend.access import DataAccess
    from jaxblend.loading import PrefetchOptions, make_loader
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    total_steps = args.warmup + args.steps
    options = GPTSchemaOptions()
    memo = tempfile.mkdtemp(dir=work, prefix="memo-")
    cache = tempfile.mkdtemp(dir=work, prefix="cache-")
    os.environ["JAXBLEND_IDENTITY_CACHE"] = memo
    access = DataAccess.from_env().with_maps(location=cache)  # reads the memo directory
    row: dict = {}
    t = time.perf_counter()
    open_gpt_sources(config(urls, total_steps), options, access=access)
    row["open uncached s"] = time.perf_counter() - t
    proxy.reset()
    t = time.perf_counter()
    src = open_gpt_sources(config(urls, total_steps), options, access=access)["train"]
    row["open cached s"] = time.perf_counter() - t
    row["cached open requests"] = proxy.requests
    t = time.perf_counter()
    src.get_batch(np.arange(B))
    row["first batch s"] = time.perf_counter() - t
    mesh = jax.make_mesh((1,), ("data",))
    loader = make_loader(src, mesh, global_batch_size=B, num_steps=total_steps,
                         prefetch=PrefetchOptions(read_ahead=args.read_ahead))
    for _ in range(args.warmup):
        jax.block_until_ready(next(loader))
    proxy.reset()
    t = time.perf_counter()
    for _ in range(args.steps):
        jax.block_until_ready(next(loader))
    dt = time.perf_counter() - t
    loader.close()
    row["steady M tokens/s"] = args.steps * B * SEQ / dt / 1e6
    row["requests / batch"] = proxy.requests / args.steps
    row["_spans"] = src.plan.spans(np.arange(B) + B * args.warmup)
    row["_names"] = src.dataset_names
    return row


def measure_megatron(urls, names, spans, proxy_url: str, work: Path, chunk: int, limit_s: float):
    """Megatron-Core's S3 reader on the spans of one global batch: tokens/s (and spans read)."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronDataset
    from megatron.core.datasets.object_storage_utils import ObjectStorageConfig

    os.environ["AWS_ENDPOINT_URL_S3"] = proxy_url
    cfg = ObjectStorageConfig(path_to_idx_cache=tempfile.mkdtemp(dir=work, prefix="mcore-idx-"),
                              bin_chunk_nbytes=chunk)
    opened: dict[int, object] = {}
    t = time.perf_counter()
    tokens = 0
    done = 0
    dataset, sequence = np.asarray(spans.dataset), np.asarray(spans.sequence)
    offset, length = np.asarray(spans.offset), np.asarray(spans.length)
    for j in range(dataset.size):
        d = int(dataset[j])
        if d not in opened:
            opened[d] = MegatronDataset(names[d], mmap=False, object_storage_config=cfg)
        tokens += opened[d].get(int(sequence[j]), int(offset[j]), int(length[j])).size
        done += 1
        if time.perf_counter() - t > limit_s:
            break
    dt = time.perf_counter() - t
    return tokens / dt / 1e6, done, dataset.size


def server_request_rate(server, url: str, key: str, n: int = 3000) -> float:
    """Requests/s of concurrent 4 KiB range reads through TensorStore to `url`."""
    with server.pointed_at(url):
        kv = server.kvstore()
        size = Path(key).stat().st_size if Path(key).exists() else 1 << 20
        rng = np.random.default_rng(0)
        starts = rng.integers(0, max(size - 4096, 1), n)
        name = "corpus/" + Path(key).name
        t = time.perf_counter()
        futures = [kv.read(name, byte_range=slice(int(s), int(s) + 4096)) for s in starts]
        for f in futures:
            f.result()
        return n / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefixes", type=int, default=1000)
    parser.add_argument("--tokens", type=float, default=1e9)
    parser.add_argument("--delays", default="0,5,20,50",
                        help="ms added per request by the relay; 'direct' = no relay")
    parser.add_argument("--servers", default="gcs,s3")
    parser.add_argument("--steps", type=int, default=24, help="timed global batches")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed batches first (default: read_ahead + 2, the pipeline fills)")
    parser.add_argument("--read_ahead", type=int, default=8)
    parser.add_argument("--megatron_seconds", type=float, default=20.0)
    parser.add_argument("--work_dir", default="/tmp/jaxblend-object-store-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.prefixes, args.tokens, args.delays, args.steps = 100, 5e7, "0,20", 8
    if args.warmup is None:
        args.warmup = args.read_ahead + 2
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    from helpers_fault_proxy import ProxyProcess
    from helpers_object_store import GcsServer, S3Server

    t = time.perf_counter()
    prefixes = write_corpus(work / "corpus", args.prefixes, int(args.tokens))
    total = sum(Path(p + ".bin").stat().st_size // 2 for p in prefixes)
    print(f"corpus: {len(prefixes)} prefixes, {total:.3e} tokens ({time.perf_counter() - t:.1f} s)")
    servers = {"gcs": GcsServer, "s3": S3Server}
    rows = []
    rates = []
    for name in args.servers.split(","):
        server = servers[name].start(work)
        try:
            t = time.perf_counter()
            urls = upload(server, prefixes)
            print(f"{name}: uploaded in {time.perf_counter() - t:.1f} s", flush=True)
            direct = server_request_rate(server, server.url, prefixes[0] + ".bin")
            with ProxyProcess(server.url) as proxy:
                proxied = server_request_rate(server, proxy.url, prefixes[0] + ".bin")
            rates.append((name, direct, proxied))
            for token in args.delays.split(","):
                direct = token.strip() == "direct"
                relay = (contextlib.nullcontext(_Direct(server.url)) if direct
                         else ProxyProcess(server.url, float(token) / 1000))
                with relay as proxy, server.pointed_at(proxy.url):
                    row = measure_jaxblend(urls, proxy, work, args)
                    row.update(server=name, delay="direct" if direct else f"{float(token):g}")
                    if name == "s3":
                        for chunk, label in ((256 << 20, "256MiB"), (1 << 20, "1MiB")):
                            with contextlib.suppress(Exception):
                                rate, done, total_spans = measure_megatron(
                                    urls, row["_names"], row["_spans"], proxy.url, work, chunk,
                                    args.megatron_seconds)
                                row[f"megatron {label} M tokens/s"] = rate
                                row[f"megatron {label} spans"] = f"{done}/{total_spans}"
                rows.append(row)
                print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                       if not k.startswith("_")}, flush=True)
        finally:
            server.stop()
    print("\n| server | ms/request | open uncached s | open cached s | requests (cached open) | "
          "first batch s | steady M tokens/s | requests/batch | Megatron 256MiB M tok/s | "
          "Megatron 1MiB M tok/s | jaxblend / best Megatron |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        mc = [r.get(f"megatron {c} M tokens/s") for c in ("256MiB", "1MiB")]
        best = max((m for m in mc if m), default=None)
        ratio = f"{r['steady M tokens/s'] / best:.0f}x" if best else "-"
        megatron = " | ".join(
            f"{m:.3f} ({r[f'megatron {c} spans']} spans)" if m else "-"
            for m, c in zip(mc, ("256MiB", "1MiB"))
        )
        print(f"| {r['server']} | {r['delay']} | {r['open uncached s']:.2f} | "
              f"{r['open cached s']:.2f} | {r['cached open requests']} | {r['first batch s']:.2f} | "
              f"{r['steady M tokens/s']:.2f} | {r['requests / batch']:.0f} | {megatron} | {ratio} |")
    print("\n| server | requests/s direct | requests/s through the proxy (0 ms) |")
    print("|---|---|---|")
    for name, direct, proxied in rates:
        print(f"| {name} | {direct:.0f} | {proxied:.0f} |")


if __name__ == "__main__":
    main()

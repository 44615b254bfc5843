"""Loader throughput: GPT sample reads vs Megatron-Core, end-to-end global batches, Grain workers.

  .venv/bin/python benchmarks/loader_throughput.py            # full: 8 CPU devices, seq 2048, B 256
  .venv/bin/python benchmarks/loader_throughput.py --quick    # smaller, for a smoke run

(a) GPT sample reads, tokens/s: jaxblend `GPTSource.get_batch` (whole batch: index-map resolution,
    one batched read, schema kernel) vs Megatron-Core `GPTDataset.__getitem__` (create_attention_mask
    off) on the same files, config and seed, same random sample ids, warm page cache.
(b) End-to-end global batches on 8 CPU devices: `make_loader` -> dict of sharded `jax.Array`s,
    blocked until ready, tokens/s.
(c) (b) with Grain worker_count 0, 1, 2.
(d) Blend width: blends of 1 / 100 / 1,000 / 10,000 datasets sharing the same total size (equal
    weights, lognormal documents): open time with and without cached maps, `get_batch` tokens/s
    (and its ratio to the 1-dataset figure) and end-to-end loader tokens/s on the devices.
    `--widths` picks the widths.
(e) Sample constructions: `get_batch` tokens/s of fill-in-the-middle (`--fim_data`, Megatron's
    rewrite with the data's byte-level BPE) against plain concatenated samples (`concat`) on a
    generated Python-like corpus, one thread, and of FIM on packed rows (`--packing=best_fit`)
    beside plain packed rows; `--constructions` adds it, `--only_constructions` runs it alone.
    `--fim_baseline=FILE` (another commit's `jaxblend/sources/fim.py`) also times that rewrite
    against this tree's on the same sources, side by side in alternating slices, after checking
    both give the same bytes.
(f) `--telemetry_overhead`: the cost of the loader's telemetry (issue 31), side by side in one
    run: end-to-end loader tokens/s (worker_count 0) with telemetry on (the default) and off
    (`TelemetryOptions(collect=False, stall_threshold=0)`), `--rounds` rounds alternating which
    goes first; and one step's read (`HostStepSource`, this thread) with and without its read
    tally. Medians and their ratio.

Prints a markdown table.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse
import sys
import tempfile
import time

import numpy as np
from absl import flags as absl_flags

absl_flags.FLAGS.mark_as_parsed()


def build_dataset(prefix: str, num_tokens: int, seed: int = 0) -> None:
    from jaxblend import IndexedDataset, IndexedDatasetBuilder

    if IndexedDataset.exists(prefix):
        return
    rng = np.random.default_rng(seed)
    lengths = np.maximum(rng.lognormal(6.5, 1.0, size=num_tokens // 600 + 16).astype(np.int64), 8)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths), num_tokens) + 1]
    with IndexedDatasetBuilder(prefix, np.uint16) as builder:
        for start in range(0, lengths.size, 4096):
            chunk = lengths[start : start + 4096]
            tokens = rng.integers(0, 50000, int(chunk.sum()), dtype=np.uint16)
            pos = 0
            for n in chunk:
                builder.add_sequence(tokens[pos : pos + n])
                builder.end_document()
                pos += n


def time_it(fn, min_seconds: float) -> tuple[float, int]:
    fn()  # warm up (compilation, page cache)
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed, calls


def megatron_dataset(prefix: str, seq: int, samples: int, seed: int):
    import torch
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    class Tok:
        eod = 0
        pad = 1
        unique_identifiers = {"class": "BenchTok"}  # noqa: RUF012 - megatron reads a dict
        vocab_size = 50000

    torch.set_num_threads(1)
    cfg = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq, blend=([prefix], None), split="100,0,0",
        path_to_cache=None, tokenizer=Tok(), reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False, create_attention_mask=False,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, None, None], lambda: True, cfg).build()
    return train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(), "jaxblend_bench"))
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--skip_megatron", action="store_true")
    parser.add_argument("--widths", default="1,100,1000,10000", help="(d) blend widths; '' skips")
    parser.add_argument("--only_widths", action="store_true", help="run (d) only")
    parser.add_argument("--constructions", action="store_true", help="also run (e)")
    parser.add_argument("--only_constructions", action="store_true", help="run (e) only")
    parser.add_argument("--telemetry_overhead", action="store_true", help="run (f) only")
    parser.add_argument("--rounds", type=int, default=7, help="(f) and --fim_baseline rounds")
    parser.add_argument("--fim_baseline", default=None,
                        help="(e) also time the FIM rewrite of this fim.py (another commit's) "
                             "against this tree's, alternating, on the same sources")
    args = parser.parse_args()
    if args.only_widths:
        blend_width_rows(args)
        return
    if args.telemetry_overhead:
        telemetry_overhead_rows(args)
        return
    if args.only_constructions:
        construction_rows(args)
        return

    import jax
    from jax.sharding import Mesh

    from jaxblend import index
    from jaxblend.access import DataAccess
    from jaxblend.loading import PrefetchOptions, make_loader
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    seq, batch = (512, 64) if args.quick else (2048, 256)
    num_tokens = 20_000_000 if args.quick else 300_000_000
    seconds = 1.0 if args.quick else args.seconds
    os.makedirs(args.data_dir, exist_ok=True)
    prefix = os.path.join(args.data_dir, f"loader_{num_tokens}")
    build_dataset(prefix, num_tokens)
    samples = (num_tokens - 1) // seq
    config = index.GPTDataConfig(
        blend=[prefix], split="100,0,0", seq_length=seq, seed=1234,
        num_samples=(samples, None, None),
    )
    access = DataAccess.from_env().with_maps(location=os.path.join(args.data_dir, "cache"))
    source = open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]
    rng = np.random.default_rng(0)
    rows = []

    ids_list = [rng.integers(0, len(source), batch) for _ in range(64)]
    it = iter(range(1 << 30))

    def ours():
        source.get_batch(ids_list[next(it) % 64])

    elapsed, calls = time_it(ours, seconds)
    ours_tps = calls * batch * seq / elapsed
    rows.append(("(a) GPT sample reads, jaxblend get_batch", ours_tps, None))
    if not args.skip_megatron:
        mega = megatron_dataset(prefix, seq, samples, 1234)
        assert len(mega) == len(source), (len(mega), len(source))
        probe = ids_list[0][:4]
        for i in probe:
            np.testing.assert_array_equal(mega[int(i)]["tokens"].numpy(), source[int(i)]["inputs"])

        def theirs():
            for i in ids_list[next(it) % 64]:
                mega[int(i)]

        elapsed, calls = time_it(theirs, seconds)
        mega_tps = calls * batch * seq / elapsed
        rows.append(("(a) GPT sample reads, Megatron-Core GPTDataset.__getitem__", mega_tps, None))
        rows[0] = (rows[0][0], ours_tps, ours_tps / mega_tps)

    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("data",))
    for workers in (0, 1, 2):
        steps = 12 if args.quick else 24
        with make_loader(source, mesh, global_batch_size=batch, num_steps=steps + 8,
                         prefetch=PrefetchOptions(worker_count=workers)) as loader:  # end of stream not timed
            for _ in range(4):  # warm-up: worker start, compilation
                jax.block_until_ready(next(loader))
            start = time.perf_counter()
            for _ in range(steps):
                jax.block_until_ready(next(loader))
            tps = steps * batch * seq / (time.perf_counter() - start)
        rows.append((f"(b/c) global batches on {jax.device_count()} devices, worker_count={workers}", tps, None))

    print(f"\nseq_length {seq}, global batch {batch}, dataset {num_tokens/1e6:.0f} M tokens, "
          f"{os.cpu_count()} cores\n")
    print("| measurement | M tokens/s | ratio vs Megatron |")
    print("|---|---:|---:|")
    for name, tps, ratio in rows:
        print(f"| {name} | {tps/1e6:.1f} | {'' if ratio is None else f'{ratio:.2f}x'} |")
    if args.widths:
        blend_width_rows(args)
    if args.constructions:
        construction_rows(args)


def code_corpus(path: str, num_docs: int, seed: int = 0) -> list[str]:
    """Python-like documents (functions, some repositories of files joined by `<file_sep>`),
    written as jsonl to `path`."""
    import json
    import random

    rng = random.Random(seed)
    names = ["alpha", "beta", "gamma", "delta", "items", "total", "value", "index", "count", "row"]
    docs = []
    for _ in range(num_docs):
        files = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            lines = []
            for _ in range(rng.randint(2, 8)):
                a, b = rng.sample(names, 2)
                lines.append(f"def {a}_{rng.randint(0, 999)}({b}, {a}=None):")
                lines += [f"    {b} = {b} * {rng.randint(1, 99)} + len({a} or [])"
                          for _ in range(rng.randint(1, 6))]
                lines.append(f"    return {b}\n")
            files.append("\n".join(lines))
        docs.append("<file_sep>".join(files))
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    return docs


def construction_rows(args) -> None:
    """(e): FIM reads against concat on the same code corpus and tokenizer."""
    import dataclasses

    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from jaxblend import index
    from jaxblend.preprocess import pipeline
    from jaxblend.preprocess import tokenizer_spec as tok_spec
    from jaxblend.preprocess.config import PreprocessConfig
    from jaxblend.sources import FIMOptions, GPTSchemaOptions, open_gpt_sources

    seq, batch = (512, 16) if args.quick else (2048, 32)
    num_docs = 4_000 if args.quick else 20_000
    seconds = 1.0 if args.quick else args.seconds
    root = os.path.join(args.data_dir, f"code_{num_docs}")
    prefix = os.path.join(root, "code_text_document")
    os.makedirs(root, exist_ok=True)
    from jaxblend import IndexedDataset

    if not IndexedDataset.exists(prefix):
        docs = code_corpus(os.path.join(root, "code.jsonl"), num_docs)
        bpe = tokenizers.Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        bpe.train_from_iterator(docs, trainers.BpeTrainer(
            vocab_size=4096, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>",
                            "<fim_pad>", "<file_sep>"],
        ))
        bpe.save(os.path.join(root, "tokenizer.json"))
        spec = tok_spec.TokenizerSpec(type="hf", model=os.path.join(root, "tokenizer.json"))
        pipeline.preprocess(PreprocessConfig(
            input=(os.path.join(root, "code.jsonl"),), output_prefix=os.path.join(root, "code"),
            tokenizer=spec, append_eod=True, workers=1, partitions=1, progress=False,
        ))
    num_tokens = IndexedDataset(prefix).num_tokens
    samples = (num_tokens - 1) // (seq + 1)
    config = index.GPTDataConfig(
        blend=[prefix], split="100,0,0", seq_length=seq, seed=1234,
        num_samples=(samples, None, None),
    )
    packed = dataclasses.replace(config, packing="best_fit", num_samples=(None, None, None))
    variants = [
        ("concat", None, config),
        ("FIM, rate 0.5, SPM 0.5", FIMOptions(rate=0.5, spm_rate=0.5), config),
        ("FIM, rate 0.9, SPM 0.5", FIMOptions(rate=0.9, spm_rate=0.5), config),
        ("FIM, rate 0.9, split <file_sep>, fragments 0.5",
         FIMOptions(rate=0.9, spm_rate=0.5, split_sample="<file_sep>", fragment_rate=0.5), config),
        ("packed (best_fit)", None, packed),
        ("FIM on packed rows, rate 0.5, SPM 0.5", FIMOptions(rate=0.5, spm_rate=0.5), packed),
    ]
    rng = np.random.default_rng(0)
    results, baselines = [], []
    for name, fim, cfg in variants:
        options = GPTSchemaOptions(fim=fim)
        source = open_gpt_sources(cfg, options)["train"]
        ids_list = [rng.integers(0, len(source), batch) for _ in range(16)]
        it = iter(range(1 << 30))

        def read(source=source, ids_list=ids_list, it=it):
            source.get_batch(ids_list[next(it) % 16])

        elapsed, calls = time_it(read, seconds)
        results.append((name, calls * batch * seq / elapsed))
        print(results[-1], flush=True)
        if fim is not None and args.fim_baseline and cfg is config:
            baselines.append((name, *fim_against_baseline(args, source, fim, read, batch * seq)))
    base = results[0][1]
    print(f"\n(e) sample constructions: seq {seq}, batch {batch}, {num_tokens / 1e6:.1f} M tokens of "
          f"code, get_batch in one thread\n")
    print("| construction | M tokens/s | vs concat |")
    print("|---|---:|---:|")
    for name, tps in results:
        print(f"| {name} | {tps / 1e6:.3f} | {tps / base:.3f}x |")
    if baselines:
        print(f"\nFIM rewrite of this tree against {args.fim_baseline} on the same source, "
              f"{args.rounds} rounds alternating, medians (M tokens per CPU second; wall)\n")
        print("| construction | baseline CPU | this CPU | this / baseline CPU | "
              "this / baseline wall |")
        print("|---|---:|---:|---:|---:|")
        for name, old_cpu, new_cpu, old_wall, new_wall in baselines:
            print(f"| {name} | {old_cpu / 1e6:.3f} | {new_cpu / 1e6:.3f} | "
                  f"{new_cpu / old_cpu:.2f}x | {new_wall / old_wall:.2f}x |")


def fim_against_baseline(args, source, fim, read, tokens_per_call):
    """(e) with `--fim_baseline=FILE` (a `jaxblend/sources/fim.py` of another commit, e.g.
    `git show REV:jaxblend/sources/fim.py > /tmp/fim_old.py`): the same source read with that
    file's `FIMTransform` and with this tree's, in alternating slices, after checking that both
    give the same batch. Returns medians (baseline CPU, this CPU, baseline wall, this wall) in
    tokens per second."""
    import importlib.util
    import statistics

    spec = importlib.util.spec_from_file_location("fim_baseline", args.fim_baseline)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    this = source.transform
    old = module.FIMTransform(fim, this.spec, this.seed)
    ids = np.arange(min(len(source), 32))
    got = {}
    for label, transform in (("baseline", old), ("this", this)):
        source.transform = transform
        got[label] = source.get_batch(ids)
    for key in got["this"]:
        if not np.array_equal(got["this"][key], got["baseline"][key]):
            raise SystemExit(f"--fim_baseline: {key} differs from this tree's: not the same bytes")
    rates = {"baseline": ([], []), "this": ([], [])}
    for r in range(args.rounds):
        order = [("baseline", old), ("this", this)]
        for label, transform in order if r % 2 == 0 else order[::-1]:
            source.transform = transform
            read()
            cpu, wall, calls = time.process_time(), time.perf_counter(), 0
            while time.perf_counter() - wall < args.seconds / 2:
                read()
                calls += 1
            rates[label][0].append(calls * tokens_per_call / (time.process_time() - cpu))
            rates[label][1].append(calls * tokens_per_call / (time.perf_counter() - wall))
    source.transform = this
    med = {k: (statistics.median(c), statistics.median(w)) for k, (c, w) in rates.items()}
    return med["baseline"][0], med["this"][0], med["baseline"][1], med["this"][1]


def telemetry_overhead_rows(args) -> None:
    """(f): tokens/s with the loader's telemetry on and off, alternating, in one run.

    On a shared machine wall time swings with the other work; the process's CPU time (all its
    threads) does much less, and telemetry costs CPU, so tokens per CPU second is the figure to
    compare. The consumer side's per-step cost is also timed directly, on a real step's tally.
    """
    import jax
    from jax.sharding import Mesh

    from jaxblend import index
    from jaxblend.access import DataAccess
    from jaxblend.loading import HostStepSource, TelemetryOptions, make_loader
    from jaxblend.loading.stall import StallWatch
    from jaxblend.loading.telemetry import LoaderCounters, batch_tokens
    from jaxblend.sampling import FixedStepPlan, ProcessRows
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources
    from jaxblend.storage.read_tally import PendingReads

    seq, batch = (512, 64) if args.quick else (2048, 256)
    num_tokens = 20_000_000 if args.quick else 300_000_000
    steps = 48 if args.quick else 24
    os.makedirs(args.data_dir, exist_ok=True)
    prefix = os.path.join(args.data_dir, f"loader_{num_tokens}")
    build_dataset(prefix, num_tokens)
    samples = (num_tokens - 1) // seq
    config = index.GPTDataConfig(blend=[prefix], split="100,0,0", seq_length=seq, seed=1234,
                                 num_samples=(samples, None, None))
    access = DataAccess.from_env().with_maps(location=os.path.join(args.data_dir, "cache"))
    source = open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]
    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("data",))
    settings = {"on": TelemetryOptions(), "off": TelemetryOptions(collect=False, stall_threshold=0)}

    def loader_tps(telemetry) -> tuple[float, float]:
        with make_loader(source, mesh, global_batch_size=batch, num_steps=steps + 8,
                         telemetry=telemetry) as loader:
            for _ in range(4):  # warm-up
                jax.block_until_ready(next(loader))
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                jax.block_until_ready(next(loader))
            tokens = steps * batch * seq
            return tokens / (time.perf_counter() - wall), tokens / (time.process_time() - cpu)

    plan = FixedStepPlan.covering(len(source), batch, 64)
    rows = ProcessRows.of(plan, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()), 0)
    hosts = {"on": HostStepSource(source, rows, tally=True), "off": HostStepSource(source, rows)}

    def read_tps(side: str) -> float:
        host, calls = hosts[side], 0
        host[0]
        cpu = time.process_time()
        while time.process_time() - cpu < (0.5 if args.quick else 1.0):
            host[calls % 64]
            calls += 1
        return calls * batch * seq / (time.process_time() - cpu)

    results: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for side in (("on", "off") if r % 2 == 0 else ("off", "on")):
            wall, cpu = loader_tps(settings[side])
            results.setdefault(("wall", side), []).append(wall)
            results.setdefault(("cpu", side), []).append(cpu)
            results.setdefault(("read", side), []).append(read_tps(side))
        print({k: round(v[-1] / 1e6, 1) for k, v in results.items()}, flush=True)

    # The telemetry's own work per step, timed alone (CPU time). Read side: a one-row step read
    # with and without its tally (the difference is the tally's cost, not the read's).
    tiny = FixedStepPlan.covering(len(source), 1, 64)
    tiny_rows = ProcessRows.of(tiny, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
                               0)
    tiny_hosts = {"on": HostStepSource(source, tiny_rows, tally=True, pending=PendingReads()),
                  "off": HostStepSource(source, tiny_rows)}
    n = 20_000
    tiny_us: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(6):
        for side in (("on", "off") if r % 2 == 0 else ("off", "on")):
            host_source = tiny_hosts[side]
            cpu = time.process_time()
            for k in range(n):
                host_source[k % 64]
            tiny_us[side].append((time.process_time() - cpu) / n * 1e6)
    read_us = float(np.median(tiny_us["on"]) - np.median(tiny_us["off"]))
    # Consumer side: what `next()` adds per step, on a real step's record and tally.
    record = hosts["on"][1]
    host = source.assemble_batch({k: v for k, v in record.items() if k != "__jaxblend_read_tally__"})
    counters = LoaderCounters()
    watch = StallWatch(3600.0, PendingReads())
    cpu = time.process_time()
    for _ in range(n):
        step_record = dict(record)
        watch.begin(1)
        watch.end()
        tally = HostStepSource.take_tally(step_record)
        counters.note_ahead(1, sum(v.nbytes for v in step_record.values()))
        counters.add_batch(tally, 0.0)
        counters.add_delivered(batch_tokens(host), 0.0)
    consumer_us = (time.process_time() - cpu) / n * 1e6
    watch.stop()
    median = {k: float(np.median(v)) for k, v in results.items()}
    step_us = batch * seq / median[("cpu", "on")] * 1e6
    print(f"\n(e) telemetry overhead: seq {seq}, batch {batch}, {jax.device_count()} devices, "
          f"{args.rounds} rounds alternating, {os.cpu_count()} cores\n")
    print("| measurement | telemetry on (median) | off (median) | on / off |")
    print("|---|---:|---:|---:|")
    for what, label in (("cpu", "(b) global batches, worker_count=0, M tokens per CPU second"),
                        ("wall", "(b) the same, M tokens/s (wall)"),
                        ("read", "one step's read (HostStepSource), M tokens per CPU second")):
        on, off = median[(what, "on")], median[(what, "off")]
        print(f"| {label} | {on / 1e6:.1f} | {off / 1e6:.1f} | {on / off:.3f} |")
    total = read_us + consumer_us
    print(f"\ntelemetry CPU per step, timed alone: read side (the step's tally) {read_us:.1f} us, "
          f"consumer side (take and add it, stall clock) {consumer_us:.1f} us; {total:.1f} us = "
          f"{100 * total / step_us:.2f}% of a step's CPU time with telemetry on "
          f"({step_us / 1e3:.2f} ms)")


def blend_width_rows(args) -> None:
    """(d): the read path's cost as the blend widens, same total tokens."""
    import jax
    from jax.sharding import Mesh

    from jaxblend import index
    from jaxblend.access import DataAccess
    from jaxblend.loading import make_loader
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _corpus import write_corpus

    seq, batch = (512, 64) if args.quick else (2048, 256)
    total = 20_000_000 if args.quick else 300_000_000
    seconds = 1.0 if args.quick else args.seconds
    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("data",))
    results = []
    for width in [int(w) for w in args.widths.split(",")]:
        prefixes = write_corpus(os.path.join(args.data_dir, f"width{width}_{total}"), width, total)
        steps = 64
        blend = [x for p in prefixes for x in ("1", p)] if width > 1 else prefixes
        cache = tempfile.mkdtemp(dir=args.data_dir, prefix="cache-")
        config = index.GPTDataConfig(
            blend=blend, split="100,0,0", seq_length=seq, seed=1234,
            num_samples=(batch * steps, None, None),
        )
        options = GPTSchemaOptions()
        access = DataAccess.from_env().with_maps(location=cache)
        start = time.perf_counter()
        open_gpt_sources(config, options, access=access)
        uncached = time.perf_counter() - start
        start = time.perf_counter()
        source = open_gpt_sources(config, options, access=access)["train"]
        cached = time.perf_counter() - start
        rng = np.random.default_rng(0)
        ids_list = [rng.integers(0, len(source), batch) for _ in range(32)]
        it = iter(range(1 << 30))
        def read(source=source, ids_list=ids_list, it=it):
            source.get_batch(ids_list[next(it) % 32])

        elapsed, calls = time_it(read, seconds)
        reads = calls * batch * seq / elapsed
        with make_loader(source, mesh, global_batch_size=batch, num_steps=steps) as loader:
            for _ in range(4):
                jax.block_until_ready(next(loader))
            start = time.perf_counter()
            for _ in range(steps - 8):
                jax.block_until_ready(next(loader))
            loader_tps = (steps - 8) * batch * seq / (time.perf_counter() - start)
        results.append((width, uncached, cached, reads, loader_tps))
        print(results[-1], flush=True)
    base = results[0][3]
    print(f"\n(d) blend width: seq {seq}, batch {batch}, {total / 1e6:.0f} M tokens in all, "
          f"{jax.device_count()} devices\n")
    print("| datasets | open, maps built s | open, maps cached s | get_batch M tokens/s | "
          "vs 1 dataset | loader M tokens/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for width, uncached, cached, reads, loader_tps in results:
        print(f"| {width:,} | {uncached:.2f} | {cached:.2f} | {reads / 1e6:.1f} | "
              f"{reads / base:.2f}x | {loader_tps / 1e6:.1f} |")


if __name__ == "__main__":
    main()

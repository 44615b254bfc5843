"""Whole-document packing (`--packing=best_fit`) against `concat` and against other packers.

For each corpus and sequence length, one dataset split (one epoch, `num_samples=None`):

* padding (share of the row tokens) and documents split (longer than a row);
* build time of the packed maps vs the GPT (`concat`) maps of the same corpus
  (`jaxblend.index.build_data_maps`, in memory);
* read speed: `GPTSource.get_batch` over steps of `--batch` consecutive samples from the local
  page cache, tokens of the rows per second (packed: real tokens only), vs `concat`;

both in CPU time (`time.process_time`: the work is single-threaded, and on a shared machine wall
time measures the scheduler), best of `--repeats`, the two methods alternating;
* beside Grain's `grain.experimental.BestFitPackIterDataset` and `FirstFitPackIterDataset`
  (when the installed Grain has them) and plain first fit (`packing.first_fit_rows`), on the
  same pieces of the first `--compare_documents` documents in the same order: padding and
  documents per CPU second (Grain's figure includes building its packed arrays of tokens, ours
  is the packing plan alone; both single-threaded, Grain without reader threads).

Corpora (uint16 tokens, written once under `--data_dir`):

* `lognormal`: lengths lognormal(ln 700 - 0.5, 1), mean ~700 tokens, at least 1;
* `long_tail`: Pareto lengths (shape 1.1) from 64 tokens, capped at 1,000,000: mostly short
  documents and a heavy tail of documents many rows long.

Usage:
    .venv/bin/python benchmarks/packing.py                      # 50M tokens per corpus
    .venv/bin/python benchmarks/packing.py --tokens=2e8
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np
from absl import app, flags

_DATA_DIR = flags.DEFINE_string("data_dir", "/tmp/jaxblend_packing_bench", "Corpus directory.")
_TOKENS = flags.DEFINE_float("tokens", 5e7, "Tokens per corpus.")
_SEQS = flags.DEFINE_list("seq_lengths", ["2048", "8192"], "Sequence lengths S.")
_BATCH = flags.DEFINE_integer("batch", 64, "Rows per read step.")
_READ_SECONDS = flags.DEFINE_float("read_seconds", 1.0, "Measuring time per read slice.")
_REPEATS = flags.DEFINE_integer(
    "repeats", 5, "Builds and read slices per figure, the methods alternating (best kept)."
)
_WINDOW = flags.DEFINE_integer("window", 16384, "--packing_window.")
_COMPARE = flags.DEFINE_integer("compare_documents", 50_000, "Documents for the packer comparison.")
_COMPARE_PACKERS = flags.DEFINE_bool(
    "compare_packers", True, "Also the packers side by side (Grain's, first fit)."
)
_GRAIN_BINS = flags.DEFINE_list("grain_bins", ["64", "1024"], "Grain num_packing_bins values.")


def _clock() -> float:
    """This process's CPU seconds: on a shared machine (2 cores, many processes here) wall time
    mostly measures the scheduler; every figure below is single-threaded CPU work."""
    return time.process_time()


def lengths_of(kind: str, total_tokens: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(total_tokens // 700 * 1.5) + 16
    if kind == "lognormal":
        lengths = np.maximum(1, rng.lognormal(np.log(700) - 0.5, 1.0, n)).astype(np.int64)
    elif kind == "long_tail":
        lengths = np.minimum(1_000_000, 64 * (1 + rng.pareto(1.1, n))).astype(np.int64)
    else:
        raise ValueError(kind)
    return lengths[: max(1, int(np.searchsorted(np.cumsum(lengths), total_tokens)))]


def write_corpus(prefix: str, lengths: np.ndarray) -> str:
    from jaxblend.storage import idx_format

    if os.path.exists(prefix + ".idx"):
        return prefix
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    rng = np.random.default_rng(1)
    rng.integers(1, 50000, int(lengths.sum()), dtype=np.uint16).tofile(prefix + ".bin")
    with open(prefix + ".idx.tmp", "wb") as f:
        idx_format.write_index(f, np.uint16, lengths, np.arange(lengths.size + 1), None)
    os.replace(prefix + ".idx.tmp", prefix + ".idx")
    return prefix


def best_of(repeats: int, fn, *args) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = _clock()
        out = fn(*args)
        best = min(best, _clock() - t)
    return best, out


def _config(prefix: str, seq_length: int, method: str):
    from jaxblend import index

    return index.GPTDataConfig(
        blend=[prefix], split="100,0,0", seq_length=seq_length, seed=1234, packing=method,
        packing_window=_WINDOW.value,
    )


class Reader:
    """Reads consecutive steps of `batch` samples of a source with `get_batch`."""

    def __init__(self, source, batch: int):
        self.source = source
        n = len(source)
        self.starts = np.arange(0, max(1, n - batch), batch)[:200]
        self.batch = batch
        packed = source.packing != "concat"
        self.real = [  # real tokens per step (padding not counted), before any clock starts
            int(np.count_nonzero(source.get_batch(np.arange(lo, lo + batch))["segment_ids"]))
            if packed else batch * source.seq_length
            for lo in self.starts
        ]

    def rate(self, seconds: float) -> float:
        """Real tokens per second over `seconds`."""
        tokens, start, step = 0, _clock(), 0
        while _clock() - start < seconds:
            k = step % len(self.real)
            self.source.get_batch(np.arange(self.starts[k], self.starts[k] + self.batch))
            tokens += self.real[k]
            step += 1
        return tokens / (_clock() - start)


def grain_pack(cls, pieces: np.ndarray, capacity: int, bins: int) -> tuple[float, float]:
    """(padding share, documents/s) of a Grain packing dataset over `pieces` token counts."""
    import grain

    tokens = np.ones(int(pieces.max()), np.int32)
    ds = grain.MapDataset.source(pieces).map(lambda n: {"inputs": tokens[:n]}).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)  # the packing, not the threads
    )
    packed = cls(ds, length_struct={"inputs": capacity}, num_packing_bins=bins, shuffle_bins=False)
    start = _clock()
    rows = real = 0
    for row in packed:
        rows += 1
        real += int(np.count_nonzero(row["inputs_segment_ids"]))
    elapsed = _clock() - start
    assert real == int(pieces.sum()), (real, int(pieces.sum()))
    return 1 - real / (rows * capacity), len(pieces) / elapsed


def main(argv):
    del argv
    from jaxblend import index
    from jaxblend.access import DataAccess
    from jaxblend.index import packing
    from jaxblend.sources import GPTSchemaOptions, open_gpt_sources
    from jaxblend.storage import IndexedDataset

    try:
        import grain.experimental as grain_experimental

        grain_packers = {
            "Grain BestFitPackIterDataset": getattr(grain_experimental, "BestFitPackIterDataset", None),
            "Grain FirstFitPackIterDataset": getattr(grain_experimental, "FirstFitPackIterDataset", None),
        }
    except ImportError:
        grain_packers = {}
    grain_packers = {k: v for k, v in grain_packers.items() if v is not None}
    import grain

    print(f"grain {getattr(grain, '__version__', '?')}; window {_WINDOW.value:,} documents")
    main_rows, compare_rows = [], []
    for kind in ("lognormal", "long_tail"):
        lengths = lengths_of(kind, int(_TOKENS.value))
        prefix = write_corpus(os.path.join(_DATA_DIR.value, kind), lengths)
        ds = IndexedDataset(prefix)
        np.fromfile(prefix + ".bin", np.uint8).sum()  # warm the page cache
        print(f"{kind}: {len(lengths):,} documents, {int(lengths.sum()):,} tokens, mean "
              f"{lengths.mean():.0f}, median {np.median(lengths):.0f}, max {lengths.max():,}")
        for s in (int(x) for x in _SEQS.value):
            config = functools.partial(_config, prefix, s)
            infos = {prefix: index.DatasetInfo(
                prefix, ds.sequence_lengths, ds.document_indices, f"bench-{kind}")}
            index.build_data_maps(config("best_fit"), infos, ("train",))  # compile
            # Interleaved and best of --repeats: the machine is shared, its load varies.
            t_concat = t_packed = float("inf")
            for _ in range(_REPEATS.value):
                t, _ = best_of(1, index.build_data_maps, config("concat"), infos, ("train",))
                t_concat = min(t_concat, t)
                t, packed = best_of(1, index.build_data_maps, config("best_fit"), infos, ("train",))
                t_packed = min(t_packed, t)
            stats = packed.split("train").packing_stats()
            sources = {}
            for method in ("concat", "best_fit"):
                cfg = config(method)
                sources[method] = open_gpt_sources(
                    cfg, GPTSchemaOptions(), access=DataAccess(), splits=("train",)
                )["train"]
            readers = {m: Reader(src, _BATCH.value) for m, src in sources.items()}
            rates = dict.fromkeys(readers, 0.0)
            for _ in range(_REPEATS.value):
                for method, reader in readers.items():
                    rates[method] = max(rates[method], reader.rate(_READ_SECONDS.value))
            main_rows.append((
                kind, s, stats["rows"], 100 * stats["padding"] / (stats["rows"] * (s + 1)),
                stats["split_documents"], t_concat, t_packed, rates["concat"], rates["best_fit"],
            ))
            print("  ", main_rows[-1])
            if not _COMPARE_PACKERS.value:
                continue
            # The packers side by side on the same pieces, in the same (stored) order.
            capacity = s + 1
            cut = packing.cut_items(lengths[: _COMPARE.value], capacity)
            pieces = cut.length
            t, rows = best_of(_REPEATS.value, packing.best_fit_pack, pieces, capacity, _WINDOW.value)
            compare_rows.append((kind, s, f"jaxblend best_fit (window {_WINDOW.value:,})",
                                 100 * rows.padding(capacity) / (len(rows) * capacity),
                                 len(pieces) / t))
            t, row_of = best_of(1, packing.first_fit_rows, pieces, capacity)
            ff_rows = int(row_of.max()) + 1
            compare_rows.append((kind, s, "first fit (every row open, Numba)",
                                 100 * (1 - pieces.sum() / (ff_rows * capacity)), len(pieces) / t))
            for name, cls in grain_packers.items():
                for bins in (int(b) for b in _GRAIN_BINS.value):
                    pad, rate = grain_pack(cls, pieces, capacity, bins)
                    compare_rows.append((kind, s, f"{name} ({bins} bins)", 100 * pad, rate))
            for row in compare_rows[-(2 + len(grain_packers) * len(_GRAIN_BINS.value)):]:
                print("  ", row)
    print()
    print("| corpus | S | rows | padding | split documents | build concat | build best_fit "
          "| ratio | read concat (tokens/s) | read best_fit (tokens/s) | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, s, rows, pad, split, tc, tp, rc, rp in main_rows:
        print(f"| {kind} | {s:,} | {rows:,} | {pad:.3f}% | {split:,} | {1e3 * tc:.1f} ms | {1e3 * tp:.1f} ms | "
              f"{tp / tc:.2f}x | {rc / 1e6:.0f} M | {rp / 1e6:.0f} M | {rp / rc:.2f}x |")
    if not compare_rows:
        return
    print()
    print(f"| corpus | S | packer ({_COMPARE.value:,} documents) | padding | documents/s |")
    print("|---|---:|---|---:|---:|")
    for kind, s, name, pad, rate in compare_rows:
        print(f"| {kind} | {s:,} | {name} | {pad:.2f}% | {rate:,.0f} |")


if __name__ == "__main__":
    app.run(main)

"""Random token-window read throughput: jaxblend storage backends vs megatron-core, side by side.

Builds (once, reused across runs) a uint16 IndexedDataset of `--size_gb` GB with random document
lengths under `--data_dir`, warms the page cache, then reads the same random windows (inside
sequences, so every method can serve them) with:

* jaxblend mmap: `SequenceSpans.read` (over the package's one token reader, what every source
  uses) on batches of `--batch` windows, and `get` one by one;
* jaxblend TensorStore file:// backend: batched `SequenceSpans.read` (`DataAccess(backend=
  "tensorstore")`);
* megatron-core `IndexedDataset.get(i, offset, length)` in a loop (when installed), both as is
  (it returns views into its mmap and copies nothing) and copying each window into a batch array
  (what a loader must do; the ratios are against this one).

Usage:
    .venv/bin/python benchmarks/read_throughput.py                  # small (0.1 GB), quick
    .venv/bin/python benchmarks/read_throughput.py --size_gb=1.0    # full size
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
from absl import app, flags, logging

from jaxblend.access import DataAccess
from jaxblend.storage import IndexedDataset, IndexedDatasetBuilder
from jaxblend.storage.sequence_spans import SequenceSpans

_DATA_DIR = flags.DEFINE_string(
    "data_dir", "/tmp/jaxblend_bench", "Directory for the generated dataset."
)
_SIZE_GB = flags.DEFINE_float("size_gb", 0.1, "Dataset size in GB (1e9 bytes) of uint16 tokens.")
_WINDOWS = flags.DEFINE_list("windows", ["2048", "8192"], "Window lengths in tokens.")
_BATCH = flags.DEFINE_integer("batch", 256, "Windows per batched read.")
_SECONDS = flags.DEFINE_float("seconds", 2.0, "Minimum measuring time per method and window size.")
_SEED = flags.DEFINE_integer("seed", 0, "Random seed.")

_MAX_DOC = 20_000
MEGATRON_VIEWS = "megatron-core get loop (returns mmap views, no copy)"
MEGATRON_BATCH = "megatron-core get loop + copy into a batch array"


def build_dataset(prefix: str, size_gb: float, seed: int) -> None:
    """Writes ~size_gb GB of uint16 tokens as documents of random length (1.._MAX_DOC tokens)."""
    rng = np.random.default_rng(seed)
    total = int(size_gb * 1e9) // 2
    written = 0
    t0 = time.perf_counter()
    with IndexedDatasetBuilder(prefix, np.uint16) as builder:
        while written < total:
            chunk = min(1 << 24, total - written)
            tokens = rng.integers(0, 65000, chunk, dtype=np.uint16)
            lengths = rng.integers(1, _MAX_DOC + 1, chunk // (_MAX_DOC // 2) + 2)
            ends = np.minimum(np.cumsum(lengths), chunk)
            starts = np.concatenate([[0], ends[:-1]])
            for a, b in zip(starts.tolist(), ends.tolist()):
                if b > a:
                    builder.add_document(tokens[a:b], [b - a])
            written += chunk
    logging.info("built %s: %.2f GB in %.1f s", prefix, total * 2 / 1e9, time.perf_counter() - t0)


def warm_page_cache(path: str) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(64 << 20):
            pass


def measure(fn: Callable[[int], int], n_batches: int, seconds: float) -> float:
    """Calls fn(k) for k = 0, 1, ... cycling over n_batches until `seconds` pass; returns tokens/s."""
    fn(0)  # warm-up (compilation, lazy opens)
    tokens = 0
    k = 0
    t0 = time.perf_counter()
    while True:
        tokens += fn(k % n_batches)
        k += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and k >= 3:
            return tokens / elapsed


def main(argv: list[str]) -> None:
    del argv
    os.makedirs(_DATA_DIR.value, exist_ok=True)
    prefix = os.path.join(_DATA_DIR.value, f"uint16_{_SIZE_GB.value:g}gb")
    if not IndexedDataset.exists(prefix):
        build_dataset(prefix, _SIZE_GB.value, _SEED.value)
    warm_page_cache(prefix + ".bin")
    mm = IndexedDataset(prefix, access=DataAccess(backend="mmap"))
    ts_variants = {"file kvstore": IndexedDataset(prefix, access=DataAccess(backend="tensorstore"))}
    try:
        from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset

        megatron = MegatronIndexedDataset(prefix)
    except ImportError:
        megatron = None

    rng = np.random.default_rng(_SEED.value + 1)
    rows = []
    for window in (int(w) for w in _WINDOWS.value):
        eligible = np.flatnonzero(mm.sequence_lengths >= window)
        n_batches = 64
        seq = rng.choice(eligible, size=(n_batches, _BATCH.value))
        off = (rng.random(seq.shape) * (mm.sequence_lengths[seq] - window + 1)).astype(np.int64)
        methods = _methods(mm, ts_variants, megatron, seq, off, window)
        results = {name: measure(fn, n_batches, _SECONDS.value) for name, fn in methods.items()}
        base = results.get(MEGATRON_BATCH)
        ours = results["jaxblend mmap SequenceSpans.read"]
        for name, rate in results.items():
            rows.append((window, name, rate, rate / base if base else float("nan"), rate / ours))

    print(
        f"\nDataset {prefix}.bin: {os.path.getsize(prefix + '.bin') / 1e9:.2f} GB uint16, "
        f"{len(mm)} documents; batch {_BATCH.value} windows; warm page cache; {os.cpu_count()} cores\n"
    )
    print("| window | method | M tokens/s | vs megatron get+copy | vs our mmap spans |")
    print("|---:|---|---:|---:|---:|")
    for window, name, rate, vs_meg, vs_ours in rows:
        print(f"| {window} | {name} | {rate / 1e6:.1f} | {vs_meg:.2f}x | {vs_ours:.2f}x |")


def _methods(
    mm: IndexedDataset,
    ts_variants: dict[str, IndexedDataset],
    megatron: object | None,
    seq: np.ndarray,
    off: np.ndarray,
    window: int,
) -> dict[str, Callable[[int], int]]:
    """Returns name -> fn(k) reading batch k of the windows (sequence seq[k], offset off[k]);
    checks first that every method returns the same tokens."""
    batch = seq.shape[1]
    counts = np.full(batch, window, dtype=np.int64)
    zeros = np.zeros(batch, dtype=np.int64)
    positions = np.arange(batch, dtype=np.int64) * window

    def windows(ds: IndexedDataset) -> Callable[[int], np.ndarray]:
        """Batch k's windows of `ds`, read with one `SequenceSpans.read`."""
        reader = SequenceSpans([ds])

        def read(k: int) -> np.ndarray:
            out = np.empty(batch * window, dtype=ds.dtype)
            reader.read(zeros, seq[k], off[k], counts, out, positions)
            return out

        return read

    def spans(ds: IndexedDataset) -> Callable[[int], int]:
        read = windows(ds)
        return lambda k: read(k).shape[0]

    expected = windows(mm)(0)

    def gets(k: int) -> int:
        return sum(mm.get(i, o, window).shape[0] for i, o in zip(seq[k].tolist(), off[k].tolist()))

    methods: dict[str, Callable[[int], int]] = {
        "jaxblend mmap SequenceSpans.read": spans(mm),
        "jaxblend mmap get loop": gets,
    }
    for mode, ds in ts_variants.items():
        np.testing.assert_array_equal(windows(ds)(0), expected)
        methods[f"jaxblend tensorstore ({mode}) SequenceSpans.read"] = spans(ds)
    if megatron is None:
        return methods

    def megatron_views(k: int) -> int:
        pairs = zip(seq[k].tolist(), off[k].tolist())
        return sum(megatron.get(i, o, window).shape[0] for i, o in pairs)

    def megatron_batch(k: int) -> int:
        out = np.empty(batch * window, dtype=mm.dtype)
        for j, (i, o) in enumerate(zip(seq[k].tolist(), off[k].tolist())):
            out[j * window : (j + 1) * window] = megatron.get(i, o, window)
        return out.shape[0]

    assert megatron_batch(0) == expected.shape[0]
    got = np.concatenate(
        [megatron.get(i, o, window) for i, o in zip(seq[0].tolist(), off[0].tolist())]
    )
    np.testing.assert_array_equal(got, expected)
    methods[MEGATRON_VIEWS] = megatron_views
    methods[MEGATRON_BATCH] = megatron_batch
    return methods


if __name__ == "__main__":
    app.run(main)

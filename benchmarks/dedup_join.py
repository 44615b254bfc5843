r"""The duplicate join on synthetic signatures: seconds and peak memory vs the memory budget.

Writes ``--records`` random signature rows in ``--partitions`` partitions (the files the signature
pass writes: positions, exact hashes, 14 band hashes, 112 MinHash values), with 5% exact and 5% near
duplicates planted across partitions, then runs :func:`jaxblend.preprocess.cleaning.join.run_join`
in a fresh process per budget and reports wall seconds, the number of shards and the process's peak
resident memory (which counts the pages of the memory-mapped signature files it touched; the OS
can drop those). The signatures on disk take ~600 bytes per record; the join's own memory follows
``--clean_join_memory_mb``, not the corpus.

Usage::

    .venv/bin/python benchmarks/dedup_join.py --records=1000000 --budgets=1024,64,16
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

from jaxblend.preprocess.cleaning import CleaningConfig, join, signatures
from jaxblend.preprocess.cleaning import text as text_lib

_RECORDS = flags.DEFINE_integer("records", 1_000_000, "Signature rows.")
_PARTITIONS = flags.DEFINE_integer("partitions", 16, "Partitions.")
_BUDGETS = flags.DEFINE_list("budgets", ["1024", "64", "16"], "join_memory_mb values.")
_CHILD = flags.DEFINE_string("child", None, "Internal: run one join on this parts directory.")
_BUDGET = flags.DEFINE_integer("budget", 1024, "Internal: the child's join_memory_mb.")


def _config(budget: int) -> CleaningConfig:
    return CleaningConfig(exact_dedup=True, near_dedup=True, join_memory_mb=budget, plot=False)


def write_signatures(parts: str, records: int, partitions: int, seed: int = 0) -> None:
    """Random signatures with planted exact and near duplicates of earlier rows."""
    cfg = _config(1024)
    rng = np.random.default_rng(seed)
    sig = rng.integers(0, 2**32, size=(records, cfg.num_perm), dtype=np.uint32)
    exact = rng.integers(0, 2**63, size=records, dtype=np.uint64)
    src = rng.integers(0, records // 2, size=records // 10)
    dst = rng.integers(records // 2, records, size=records // 10)
    exact[dst[: records // 20]] = exact[src[: records // 20]]
    sig[dst] = sig[src]
    near = dst[records // 20 :]
    flip = rng.integers(0, cfg.num_perm, size=(near.shape[0], 8))  # ~93% of values agree
    sig[near[:, None], flip] ^= np.uint32(1)
    bands = np.empty((records, cfg.bands), np.uint64)
    width = cfg.rows
    for b in range(cfg.bands):  # the band keys SignatureWriter.add computes, one band at a time
        block = np.ascontiguousarray(sig[:, b * width : (b + 1) * width])
        bands[:, b] = [text_lib.hash64(row.tobytes()) for row in block]
    bounds = np.linspace(0, records, partitions + 1).astype(int)
    os.makedirs(parts, exist_ok=True)
    for i in range(partitions):
        lo, hi = bounds[i], bounds[i + 1]
        d = signatures.sig_dir(parts, i)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "positions.npy"), np.arange(hi - lo, dtype=np.int64))
        np.save(os.path.join(d, "exact.npy"), exact[lo:hi])
        np.save(os.path.join(d, "words.npy"), np.ones(hi - lo, bool))
        np.save(os.path.join(d, "bands.npy"), bands[lo:hi])
        np.save(os.path.join(d, "minhash.npy"), sig[lo:hi])


def _child(parts: str, budget: int) -> None:
    t0 = time.perf_counter()
    stats = join.run_join(parts, list(range(_PARTITIONS.value)), _config(budget))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{budget:>8d} {stats['shards']:>7d} {time.perf_counter() - t0:>8.1f} {peak_mb:>9.0f} "
        f"{stats['exact_duplicates']:>8,d} {stats['near_duplicates']:>8,d}"
    )


def main(argv: list[str]) -> None:
    del argv
    if _CHILD.value:
        _child(_CHILD.value, _BUDGET.value)
        return
    work = tempfile.mkdtemp(prefix="dedup_join_")
    try:
        parts = os.path.join(work, "parts")
        t0 = time.perf_counter()
        write_signatures(parts, _RECORDS.value, _PARTITIONS.value)
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(parts) for f in fs)
        print(
            f"{_RECORDS.value:,} records in {_PARTITIONS.value} partitions, signatures "
            f"{size / 1e6:,.0f} MB on disk (written in {time.perf_counter() - t0:.0f} s)"
        )
        print(
            f"{'budget MB':>8s} {'shards':>7s} {'seconds':>8s} {'peak MB':>9s} {'exact':>8s} {'near':>8s}"
        )
        for budget in _BUDGETS.value:
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    f"--child={parts}",
                    f"--budget={budget}",
                    f"--partitions={_PARTITIONS.value}",
                ],
                check=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    app.run(main)

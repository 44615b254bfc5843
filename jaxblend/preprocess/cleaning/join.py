"""The duplicate join: reads every partition's signatures from disk, decides what to drop.

Rules (input order decides; the result does not depend on the number of partitions or shards):

* **exact**: a record whose normalized-text hash equals an earlier record's is dropped
  (``exact_duplicate``); the first occurrence is kept.
* **near**: for every LSH band, records (with at least one word) sharing the band key form a
  bucket; a record is dropped (``near_duplicate``) when, in some band, the bucket's first record is
  earlier and the two MinHash signatures agree on at least ``near_threshold`` of their values (the
  estimated Jaccard similarity of their shingle sets). A record that is both is counted as exact.

Larger than memory: the join never holds all signatures. Keys are split into ``shards`` by value
(``key % shards``) so that one shard's keys, record ids and sort fit ``join_memory_mb``; it reads one
shard of one band at a time from the memory-mapped ``bands.npy``/``exact.npy`` of every partition,
and reads the two signatures of each candidate pair from ``minhash.npy`` on demand.

Output, per partition, ``part-NNNNN.dedup.npy``: int64 rows ``(position, reason)`` (reason 1 =
exact, 2 = near), then ``dedup.join.json`` (the join's done marker and statistics).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxblend import atomic_write
from jaxblend.preprocess import layout
from jaxblend.preprocess.cleaning import signatures
from jaxblend.preprocess.cleaning.config import CleaningConfig

EXACT = 1
NEAR = 2
_ROW_BITS = 40
_ROW_MASK = (1 << _ROW_BITS) - 1
_BYTES_PER_KEY = 40  # key, id, sort permutation and temporaries
_PAIR_CHUNK = 1 << 16


def drops_path(parts: str, index: int) -> str:
    """Returns partition ``index``'s list of records to drop."""
    return os.path.join(parts, f"part-{index:05d}.dedup.npy")


def marker_path(parts: str) -> str:
    """Returns the join's done marker."""
    return os.path.join(parts, "dedup.join.json")


def read_marker(parts: str) -> dict[str, Any] | None:
    """The join's statistics if it finished, else None."""
    return layout.read_json(marker_path(parts))


def load_drops(parts: str, index: int) -> dict[int, int]:
    """position -> reason (``EXACT``/``NEAR``) of partition ``index``."""
    rows = np.load(drops_path(parts, index))
    return dict(zip(rows[:, 0].tolist(), rows[:, 1].tolist()))


def _first_in_bucket(keys: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorts by (key, id); returns (later members, the first id of their bucket)."""
    order = np.lexsort((ids, keys))
    keys, ids = keys[order], ids[order]
    starts = np.ones(keys.shape[0], dtype=bool)
    starts[1:] = keys[1:] != keys[:-1]
    first = np.maximum.accumulate(np.where(starts, np.arange(keys.shape[0]), 0))
    return ids[~starts], ids[first[~starts]]


class _Join:
    def __init__(self, parts: str, indices: Sequence[int], config: CleaningConfig) -> None:
        self.parts = parts
        self.indices = list(indices)
        self.config = config
        self.words = [signatures.load(parts, i, "words") for i in self.indices]
        n = sum(w.shape[0] for w in self.words)
        self.shards = max(1, math.ceil(n * _BYTES_PER_KEY / (config.join_memory_mb * 2**20)))
        self.sigs = (
            [signatures.load(parts, i, "minhash") for i in self.indices]
            if config.near_dedup
            else []
        )

    def _shard(self, column: Any, s: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keys, ids = [], []
        for p in range(len(self.indices)):
            col = np.asarray(column(p))
            m = (col % np.uint64(self.shards)) == np.uint64(s)
            if exclude is not None:
                m &= exclude[p]
            rows = np.flatnonzero(m)
            keys.append(col[rows])
            ids.append(record_ids(p, rows))
        return np.concatenate(keys), np.concatenate(ids)

    def exact(self) -> np.ndarray:
        dropped = []
        for s in range(self.shards):
            keys, ids = self._shard(
                lambda p: signatures.load(self.parts, self.indices[p], "exact"), s, None
            )
            later, _ = _first_in_bucket(keys, ids)
            dropped.append(later)
        return np.unique(np.concatenate(dropped))  # one array per shard, at least one

    def near(self) -> tuple[np.ndarray, int]:
        alive = [np.asarray(w) for w in self.words]
        dropped: list[np.ndarray] = []
        candidates = 0
        bands = [signatures.load(self.parts, i, "bands") for i in self.indices]
        for b in range(self.config.bands):
            for s in range(self.shards):
                keys, ids = self._shard(lambda p, b=b: bands[p][:, b], s, alive)
                later, first = _first_in_bucket(keys, ids)
                candidates += later.shape[0]
                for c in range(0, later.shape[0], _PAIR_CHUNK):
                    x, f = later[c : c + _PAIR_CHUNK], first[c : c + _PAIR_CHUNK]
                    x_sigs, f_sigs = (gather(ids, self.sigs.__getitem__, self.config) for ids in (x, f))
                    dropped.append(x[similar(x_sigs, f_sigs, self.config)])
        out = np.unique(np.concatenate(dropped)) if dropped else np.zeros(0, np.int64)
        return out, candidates


def gather(
    ids: np.ndarray, minhash: Callable[[int], np.ndarray], config: CleaningConfig
) -> np.ndarray:
    """The MinHash signatures of record ``ids``; ``minhash(p)`` gives those of the plan's ``p``-th
    partition."""
    out = np.empty((ids.shape[0], config.num_perm), np.uint32)
    part, row = split_id(ids)
    for p in np.unique(part).tolist():
        m = part == p
        out[m] = minhash(p)[row[m]]
    return out


def similar(a: np.ndarray, b: np.ndarray, config: CleaningConfig) -> np.ndarray:
    """Whether each row pair of signatures agrees on at least ``near_threshold`` of its values."""
    return (a == b).mean(axis=1) >= config.near_threshold


def split_id(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(partition ordinal in the plan, signature row) of record ids."""
    return ids >> _ROW_BITS, ids & _ROW_MASK


def record_ids(p: int, rows: np.ndarray) -> np.ndarray:
    """Record ids (ordered as the input) of signature ``rows`` of the plan's ``p``-th partition."""
    return (np.int64(p) << _ROW_BITS) | rows.astype(np.int64)


def write_drops(parts: str, index: int, rows: np.ndarray, reasons: np.ndarray) -> None:
    """Writes partition ``index``'s drop list from signature ``rows`` and their ``reasons``."""
    positions = np.asarray(signatures.load(parts, index, "positions"))[rows]
    out = np.stack([positions, reasons], axis=1).astype(np.int64).reshape(-1, 2)
    out = out[np.argsort(out[:, 0], kind="stable")]
    with atomic_write.atomic_file(drops_path(parts, index)) as f:
        np.save(f, out)


def finish(parts: str, indices: Sequence[int], stats: dict[str, Any]) -> dict[str, Any]:
    """Adds the drop counts read back from the drop lists to ``stats``; writes the done marker."""
    counts = {EXACT: 0, NEAR: 0}
    signed = 0
    for index in indices:
        reasons = np.load(drops_path(parts, index))[:, 1]
        for r in counts:
            counts[r] += int((reasons == r).sum())
        signed += signatures.load(parts, index, "words").shape[0]
    stats = {
        "records_signed": signed,
        "exact_duplicates": counts[EXACT],
        "near_duplicates": counts[NEAR],
        **stats,
    }
    layout.write_json_atomic(marker_path(parts), stats)
    return stats


def run_join(parts: str, indices: Sequence[int], config: CleaningConfig) -> dict[str, Any]:
    """Decides the duplicates of all partitions ``indices`` (in input order) on this machine;
    writes the drop lists and the done marker; returns the statistics."""
    t0 = time.perf_counter()
    j = _Join(parts, indices, config)
    exact = j.exact() if config.exact_dedup else np.zeros(0, np.int64)
    near, candidates = j.near() if config.near_dedup else (np.zeros(0, np.int64), 0)
    near = np.setdiff1d(near, exact)
    ids = np.concatenate([exact, near])
    reasons = np.concatenate([np.full(exact.shape, EXACT), np.full(near.shape, NEAR)])
    part, rows = split_id(ids)
    for p, index in enumerate(indices):
        write_drops(parts, index, rows[part == p], reasons[part == p])
    stats = {"near_candidates": int(candidates), "shards": j.shards}
    return finish(parts, indices, {**stats, "seconds": time.perf_counter() - t0})

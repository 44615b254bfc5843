"""Synthetic corpora for the benchmarks: many uint16 prefixes with lognormal document lengths.

Written with the storage layer's own `.idx` encoder and raw token bytes (no per-document Python
loop), so a 10,000-prefix corpus takes seconds. Files already present are kept.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def write_corpus(
    directory: str | os.PathLike, prefixes: int, total_tokens: int, *, mean_log_length: float = 6.0,
    seed: int = 0,
) -> list[str]:
    """Writes `prefixes` datasets of about `total_tokens / prefixes` tokens each; returns them.

    Document lengths are lognormal(`mean_log_length`, 1) tokens (at least 8), token ids uniform in
    [1, 50000).
    """
    from jaxblend.storage import idx_format

    out = []
    per = max(total_tokens // prefixes, 64)
    rng = np.random.default_rng(seed)
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    for k in range(prefixes):
        prefix = str(root / f"p{k:05d}")
        out.append(prefix)
        lengths = np.maximum(rng.lognormal(mean_log_length, 1.0, size=per // 300 + 16), 8).astype(np.int64)
        lengths = lengths[: max(1, int(np.searchsorted(np.cumsum(lengths), per)))]
        if Path(prefix + ".idx").exists():
            continue
        rng.integers(1, 50000, int(lengths.sum()), dtype=np.uint16).tofile(prefix + ".bin")
        with open(prefix + ".idx.tmp", "wb") as f:
            idx_format.write_index(f, np.uint16, lengths, np.arange(lengths.size + 1), None)
        os.replace(prefix + ".idx.tmp", prefix + ".idx")
    return out

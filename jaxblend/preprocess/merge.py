"""After the partitions: merging their partial datasets and adding up their counts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxblend import storage
from jaxblend._pause import pause_point
from jaxblend.preprocess import layout
from jaxblend.preprocess import records as records_lib


def merge_parts(part_prefixes: Sequence[str], output: str, dtype: np.dtype) -> None:
    """Merges partial datasets in order into ``output`` (written under temporary names, renamed)."""
    layout.remove_temporaries(
        os.path.dirname(os.path.abspath(output)), os.path.basename(output) + ".*"
    )
    with storage.IndexedDatasetBuilder(output, dtype=dtype) as b:
        for merged, p in enumerate(part_prefixes):
            pause_point("merge", merged)
            b.merge(p)
        pause_point("merge", len(part_prefixes))


def aggregate(
    results: Sequence[dict[str, Any]], keys: Sequence[str], itemsize: int
) -> tuple[int, int, dict[str, dict[str, int]], dict[str, dict[str, Any]]]:
    """Adds up the partitions' done-marker results.

    Returns:
      (records, input bytes, key -> counts including output bytes, reason -> drops in
      `records.REASONS` order with at most `records.MAX_EXAMPLES` examples each).
    """
    records = sum(r["records"] for r in results)
    input_bytes = sum(r["input_bytes"] for r in results)
    fields = ("documents", "empty_documents", "sequences", "tokens")
    counts = {k: {**dict.fromkeys(fields, 0), "bytes": 0} for k in keys}
    dropped: dict[str, dict[str, Any]] = {}
    for r in results:
        for k in keys:
            for f in fields:
                counts[k][f] += r["keys"][k].get(f, 0)
        records_lib.add_drops(dropped, r["dropped"])
    for k in keys:
        counts[k]["bytes"] = counts[k]["tokens"] * itemsize
        trained = [r["keys"][k]["trained_tokens"] for r in results if "trained_tokens" in r["keys"][k]]
        if trained:  # --chat: tokens under the loss mask
            counts[k]["trained_tokens"] = sum(trained)
    return records, input_bytes, counts, records_lib.in_report_order(dropped)

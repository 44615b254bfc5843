"""The cleaning report: what each step removed or changed, as JSON, a table and a PNG.

:func:`build` aggregates the partitions' results (their ``dropped`` reasons with input bytes and
``file:line`` examples, and their ``cleaning`` section: PII replacements, quality-score histograms,
kept records) with the duplicate join's statistics. :func:`write` puts
``<dir>/.jaxblend/<name>.cleaning.json`` (and, with matplotlib, ``<name>.cleaning.png``: one panel
per enabled quality filter, the score distribution with its bounds) beside the run record of output
prefix ``<dir>/<name>`` (:func:`paths`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxblend import atomic_write
from jaxblend.preprocess.cleaning import cleaner, quality
from jaxblend.preprocess.cleaning.config import CleaningConfig
from jaxblend.tokenizer_facts import side_path

STEPS = ("validation", "quality", "language", "decontamination", "exact_dedup", "near_dedup")
_STEP_OF = {
    cleaner.LANGUAGE: "language",
    cleaner.CONTAMINATED: "decontamination",
    cleaner.EXACT_DUPLICATE: "exact_dedup",
    cleaner.NEAR_DUPLICATE: "near_dedup",
}


def step_of(reason: str) -> str:
    """The step a drop reason belongs to (input validation for the non-cleaning reasons)."""
    if reason.startswith(cleaner.QUALITY_PREFIX):
        return "quality"
    return _STEP_OF.get(reason, "validation")


def build(
    config: CleaningConfig,
    results: Sequence[Mapping[str, Any]],
    dropped: Mapping[str, Mapping[str, Any]],
    join_stats: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The report as a JSON-able dict (see the module docstring)."""
    records = sum(r["records"] for r in results)
    input_bytes = sum(r["input_bytes"] for r in results)
    steps: dict[str, dict[str, Any]] = {
        s: {"documents": 0, "bytes": 0, "reasons": {}} for s in STEPS
    }
    for reason, d in dropped.items():
        st = steps[step_of(reason)]
        st["documents"] += d["count"]
        st["bytes"] += d.get("bytes", 0)
        st["reasons"][reason] = dict(d)
    pii = {"documents": 0, "email": 0, "ipv4": 0, "ipv6": 0}
    kept = {"documents": 0, "bytes": 0}
    hists: dict[str, np.ndarray] = {}
    for r in results:
        c = r.get("cleaning") or {}
        for k in pii:
            pii[k] += c.get("pii", {}).get(k, 0)
        for k in kept:
            kept[k] += c.get("kept", {}).get(k, 0)
        for name, h in c.get("histograms", {}).items():
            hists[name] = hists.get(name, 0) + np.asarray(h, np.int64)
    filters = {
        f.name: {
            "min": f.low,
            "max": f.high,
            "bins": list(f.bins),
            "histogram": hists.get(f.name, np.zeros(len(f.bins) + 1, np.int64)).tolist(),
        }
        for f in config.filters()
    }
    return {
        "input": {"records": records, "bytes": input_bytes},
        "kept": kept,
        "removed": {s: v for s, v in steps.items() if v["documents"]},
        "pii": pii,
        "quality_filters": filters,
        "dedup": dict(join_stats or {}),
        "settings": {
            **config.identity(),
            "rows": config.rows,
            "lsh_threshold": config.lsh_threshold,
        },
    }


def table(report: Mapping[str, Any]) -> str:
    """A plain-text table of the report: one row per step and reason."""
    inp = report["input"]
    rows = [("step", "reason", "documents", "bytes", "e.g.")]
    for step, v in report["removed"].items():
        for reason, d in v["reasons"].items():
            ex = d["examples"][0] if d["examples"] else ""
            rows.append((step, reason, f"{d['count']:,}", f"{d.get('bytes', 0):,}", ex))
    p = report["pii"]
    if p["documents"]:
        replaced = f"{p['email']} e-mail, {p['ipv4']} IPv4, {p['ipv6']} IPv6 replaced"
        rows.append(("pii", "scrubbed (kept)", f"{p['documents']:,}", "", replaced))
    kept = report["kept"]
    rows.append(("kept", "", f"{kept['documents']:,}", f"{kept['bytes']:,}", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"cleaning: {inp['records']:,} records, {inp['bytes']:,} bytes in"]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return "\n".join(lines)


def paths(output_prefix: str) -> tuple[str, str]:
    """The report's JSON and PNG paths, beside the run record:
    ``<dir>/.jaxblend/<name>.cleaning.json`` and ``.png`` (`jaxblend.tokenizer_facts.side_path`)."""
    return side_path(output_prefix, ".cleaning.json"), side_path(output_prefix, ".cleaning.png")


def plot(report: Mapping[str, Any], path: str) -> bool:
    """Writes the quality-score distributions with their bounds; False without matplotlib."""
    filters = report["quality_filters"]
    if not filters:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cols = min(4, len(filters))
    nrows = -(-len(filters) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False)
    by_name = {f.name: f for f in quality.GOPHER}
    for ax, (name, f) in zip(axes.flat, filters.items()):
        edges = np.asarray(f["bins"])
        counts = np.asarray(f["histogram"])[1:-1]  # under/overflow are not drawn
        ax.stairs(counts, edges, fill=True, alpha=0.6)
        for bound, label in ((f["min"], "min"), (f["max"], "max")):
            if bound is not None:
                ax.axvline(bound, color="red", linestyle="--", label=f"{label} {bound:g}")
        if by_name[name].log:
            ax.set_xscale("log")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(filters) :]:
        ax.axis("off")
    fig.suptitle("quality scores (documents per bin) and thresholds")
    fig.tight_layout()
    with atomic_write.atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=80)
    plt.close(fig)
    return True

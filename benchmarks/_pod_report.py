"""The markdown report of benchmarks/pod_start.py, from its results JSON.

Tables: the figures per size and side; new/old ratios per size; the overhead shares the issue's
targets are stated in; growth factors between sizes (1e8 -> 1e9 -> 1e10 tokens at 1,000 prefixes,
1,000 -> 10,000 -> 100,000 prefixes at one token count, and first -> last); and an extrapolation to 1e12 tokens, 10,000 prefixes
and 256 hosts from those growth factors (power laws through two or three points).
"""

from __future__ import annotations

import itertools
import math

MB = 1e6

# (key, column title) of the figures compared across sides and sizes.
_COMPARED = (
    ("build_s", "build s"), ("build_read", "build read"), ("first_s", "first batch s"),
    ("first_read", "read before first batch"), ("host1_read", "1-step run read"),
    ("host_read", "read over steps"), ("rss1_mb", "peak RSS 1 step"),
    ("rss_mb", "peak RSS all steps"), ("pod_read", "P hosts read"),
    ("pod_first_s", "P hosts first batch s"),
)


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / MB:,.1f}"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _times(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}x"


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _quotient(a: float | None, b: float | None) -> float | None:
    """b / a, or None when either is missing or a is not positive."""
    if a is None or b is None or a <= 0:
        return None
    return b / a


def size_label(size: dict) -> str:
    return f"{size['nominal_tokens']:.0e} tok / {size['prefixes']:,} p"


def _phase(side: dict, name: str) -> dict:
    result = side.get(name) or {}
    return {} if "error" in result else result


def metrics(side: dict, config: dict) -> dict:
    """The figures of one side at one size (None where a phase failed or did not run)."""
    steps, batch, seq = config["steps"], config["global_batch_size"], config["seq_length"]
    build, host1 = _phase(side, "build"), _phase(side, "host1")
    host, pod = _phase(side, "host"), _phase(side, "pod")
    m = {
        "build_s": build.get("seconds"), "build_read": build.get("read_bytes"),
        "build_requests": build.get("requests"),
        "first_s": host1.get("first_batch_s"), "first_read": host1.get("first_read_bytes"),
        "first_requests": host1.get("first_requests"), "host1_read": host1.get("read_bytes"),
        "host_read": host.get("read_bytes"), "host_requests": host.get("requests"),
        "rss1_mb": host1.get("peak_rss_mb"), "rss_mb": host.get("peak_rss_mb"),
        "pod_read": pod.get("read_bytes"), "pod_requests": pod.get("requests"),
        "pod_first_s": pod.get("first_batch_s"),
        "token_bytes": steps * batch * (seq + 1) * 2,
        "batch_token_bytes": batch * (seq + 1) * 2,
    }
    m["host_bin"], m["host_idx"] = host.get("bin_bytes"), host.get("idx_bytes")
    m["first_bin"], m["first_idx"] = host1.get("first_bin_bytes"), host1.get("first_idx_bytes")
    m["overhead_share"] = (None if m["host_read"] is None
                           else (m["host_read"] - m["token_bytes"]) / m["token_bytes"])
    m["non_bin_share"] = (None if m["host_read"] is None or m["host_bin"] is None
                          else (m["host_read"] - m["host_bin"]) / max(m["host_bin"], 1))
    m["first_beyond_batch"] = (None if m["first_read"] is None
                               else m["first_read"] - m["batch_token_bytes"])
    m["pod_per_build"] = _quotient(m["build_read"], m["pod_read"])
    hosts = config.get("hosts", 0)
    # What each further host adds to one build's reads (its own batches, or a rebuild of its own).
    m["pod_extra"] = (None if m["pod_read"] is None or m["build_read"] is None or hosts < 2
                      else max(m["pod_read"] - m["build_read"], 0) / (hosts - 1))
    return m


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _header(titles: list[str], text_columns: int) -> list[str]:
    return [_row(titles), "|" + "---|" * text_columns + "---:|" * (len(titles) - text_columns)]


def report(results: dict) -> str:
    """The whole report."""
    config = results["config"]
    sides = list(config["trees"])
    table = {(size_label(size), side["side"]): metrics(side, config)
             for size in results["sizes"] for side in size["sides"]}
    trees = ", ".join(f"{s} = {t} (commit {results['commits'].get(s, '?')})"
                      for s, t in config["trees"].items())
    lines = [
        (f"Run {results['run_id']}: {config['delay_ms']:g} ms per request, seq {config['seq_length']}, "
        f"global batch {config['global_batch_size']}, {config['steps']} steps, P = "
        f"{config['hosts']} hosts; {trees}."),
        "",
        *_header(["size", "side", "build s", "build read MB (requests)", "host: first batch s",
                  "read before first batch MB (requests)", "1-step run read MB",
                  "read over steps MB (requests)", "token MB", "peak RSS MB, 1 step / all steps",
                  "P hosts read MB (requests)", "P hosts: all first batch s"], 2),
    ]
    for (label, side), m in table.items():
        lines.append(_row([
            label, side, _s(m["build_s"]), f"{_mb(m['build_read'])} ({_num(m['build_requests'])})",
            _s(m["first_s"]), f"{_mb(m['first_read'])} ({_num(m['first_requests'])})",
            _mb(m["host1_read"]), f"{_mb(m['host_read'])} ({_num(m['host_requests'])})",
            _mb(m["token_bytes"]), f"{_num(m['rss1_mb'])} / {_num(m['rss_mb'])}",
            f"{_mb(m['pod_read'])} ({_num(m['pod_requests'])})", _s(m["pod_first_s"]),
        ]))
    labels = [size_label(s) for s in results["sizes"]]
    if len(sides) == 2:
        old, new = sides
        lines += ["", f"Ratios {new} / {old}:", "",
                  *_header(["size", *(title for _, title in _COMPARED)], 1)]
        for label in labels:
            a, b = table.get((label, old)), table.get((label, new))
            if a and b:
                lines.append(_row([label, *(_times(_quotient(a[k], b[k])) for k, _ in _COMPARED)]))
    lines += [
        "", ("The issue's targets per side. Over the steps: bytes of objects other than `.bin` "
             "(`.idx`, maps, records, identities) as a share of the `.bin` bytes read, and all "
             "bytes beyond the batches' own tokens as a share of those tokens; before the first "
             "batch: `.bin` / `.idx` / other MB, and all bytes beyond that batch's own tokens; P "
             "hosts' reads as a multiple of one build's:"), "",
        *_header(["size", "side", "non-.bin share over steps", "beyond-token share over steps",
                  "before first batch: .bin / .idx / other MB",
                  "before first batch beyond its tokens MB", "P hosts read / build read"], 2),
    ]
    for (label, side), m in table.items():
        parts = "-"
        if m["first_bin"] is not None:
            parts = " / ".join(_mb(x) for x in (
                m["first_bin"], m["first_idx"], m["first_read"] - m["first_bin"] - m["first_idx"]))
        lines.append(_row([label, side, _percent(m["non_bin_share"]),
                           _percent(m["overhead_share"]), parts, _mb(m["first_beyond_batch"]),
                           _times(m["pod_per_build"])]))
    lines += _same_batches(results)
    lines += _growth(results, table, sides)
    return "\n".join(lines)


def _same_batches(results: dict) -> list[str]:
    """Whether the first global batch (all keys, all rows) is the same bytes on every side."""
    lines = ["", "First global batch (SHA-256 of every array of the 1-step run's dump):", ""]
    for size in results["sizes"]:
        digests = {s["side"]: (s.get("host1") or {}).get("batch_sha256") for s in size["sides"]}
        values = list(digests.values())
        if len(values) < 2:
            verdict = "one side only"
        elif None in values:
            verdict = "not compared (a side has no dump)"
        else:
            verdict = "same" if len(set(values)) == 1 else "**differ**"
        shown = ", ".join(f"{side} {(d or '-')[:12]}" for side, d in digests.items())
        lines.append(f"- {size_label(size)}: {verdict} ({shown})")
    return lines


_GROWN = (("first_read", "read before first batch"), ("host1_read", "1-step run read"),
          ("host_read", "read over steps"), ("rss1_mb", "peak RSS 1 step"),
          ("first_s", "first batch s"), ("build_read", "build read"),
          ("pod_read", "P hosts read"), ("pod_extra", "P hosts: each further host's read"))


def _growth(results: dict, table: dict, sides: list[str]) -> list[str]:
    by = {(s["nominal_tokens"], s["prefixes"]): size_label(s) for s in results["sizes"]}
    token_steps = sorted(t for t, p in by if p == 1000)
    pairs = [((a, 1000), (b, 1000)) for a, b in itertools.pairwise(token_steps)]
    # Prefix growth at one token count: each step (1,000 -> 10,000 -> 100,000) and, with more
    # than two sizes, first -> last; the largest token count measured at several prefix counts.
    prefix_pairs: list = []
    for t in sorted({t for t, _ in by}):
        counts = sorted(p for u, p in by if u == t)
        if len(counts) > 1:
            steps = [((t, a), (t, b)) for a, b in itertools.pairwise(counts)]
            prefix_pairs = steps + ([((t, counts[0]), (t, counts[-1]))] if len(counts) > 2 else [])
    pairs += prefix_pairs
    if not pairs:
        return []
    lines = ["", "Growth factors (later size / earlier size):", "",
             *_header(["side", "from -> to", *(title for _, title in _GROWN)], 2)]
    # (side, tokens|prefixes, key) -> growth per decade; the last (largest) pair of a kind wins.
    per_decade: dict[tuple[str, str, str], float] = {}
    for side, (lo, hi) in itertools.product(sides, pairs):
        a, b = table.get((by[lo], side)), table.get((by[hi], side))
        if not (a and b):
            continue
        growth = {k: _quotient(a[k], b[k]) for k, _ in _GROWN}
        lines.append(_row([side, f"{by[lo]} -> {by[hi]}",
                           *(_times(growth[k]) for k, _ in _GROWN)]))
        kind = "prefixes" if lo[0] == hi[0] else "tokens"
        decades = math.log10(hi[1] / lo[1]) if kind == "prefixes" else math.log10(hi[0] / lo[0])
        for k, _ in _GROWN:
            if growth[k]:
                per_decade[(side, kind, k)] = growth[k] ** (1 / decades)
    if not token_steps:
        return lines
    top = max(token_steps)
    hosts = results["config"]["hosts"]
    lines += [
        "", (f"Extrapolation to 1e12 tokens, 10,000 prefixes, 256 hosts: the largest 1,000-prefix "
        f"size ({top:.0e} tokens) times each figure's per-decade growth over the largest token "
        f"step measured, for every decade up to 1e12 (growth 1 where only one token size was "
        f"measured), times its 1,000 -> 10,000 "
        f"prefix growth; P = 256 hosts read one build plus 255 times what each further host "
        f"added at P = {hosts} (each extrapolated by its own growth). Power laws through two or three points: an order of magnitude, not a "
        f"forecast."), "",
        *_header(["side", "read before first batch MB", "1-step run read MB",
                  "read over steps MB", "peak RSS MB", "first batch s",
                  "P = 256 hosts read GB"], 1),
    ]
    decades = math.log10(1e12 / top)
    for side in sides:
        base = table.get((by[(top, 1000)], side))
        if not base:
            continue
        at = {}
        for k, _ in _GROWN:
            if base[k] is not None:
                at[k] = (base[k] * per_decade.get((side, "tokens", k), 1.0) ** decades
                         * per_decade.get((side, "prefixes", k), 1.0))
        p256 = None
        if "pod_extra" in at and "build_read" in at:
            p256 = at["build_read"] + at["pod_extra"] * 255
        lines.append(_row([
            side, _mb(at.get("first_read")), _mb(at.get("host1_read")), _mb(at.get("host_read")),
            _num(at.get("rss1_mb")), _s(at.get("first_s")),
            "-" if p256 is None else f"{p256 / 1e9:,.1f}",
        ]))
    return lines

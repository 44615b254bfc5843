"""pytest plugin: the test files that take longest run first, so two workers finish together.

`dev.py test` runs the suite on two pytest-xdist workers with `--dist loadfile`: each file's tests
go to one worker, and a worker that runs out of work is handed the next file in collection order
(with `--no-loadscope-reorder`; xdist's default order is by number of tests, which says little
about time). A slow file handed out last keeps one worker busy while the other waits. So the
collection is reordered by each file's measured seconds, longest first (a greedy longest-first
schedule), from the checked-in list `file_seconds.txt` next to this module. A file the list does
not know (a new one) goes before all others: run early, its time cannot make the run's tail. The
tests of one file stay together and in their own order (module fixtures and tests that build on
each other rely on it).

Refresh the list from a full run's JUnit XML (`dev.py test --junitxml=run.xml`):

    python3 tests/slow_files_first.py run.xml
"""

from __future__ import annotations

import collections
import os
import sys
from xml.etree import ElementTree

WEIGHTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "file_seconds.txt")


def read_weights(path: str | None = None) -> dict[str, float]:
    """`seconds path` lines (paths relative to the repository root) as {path: seconds}; `path`
    defaults to `WEIGHTS`."""
    path = path or WEIGHTS
    weights = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            seconds, _, name = line.partition(" ")
            try:
                weights[name.strip()] = float(seconds)
            except ValueError:
                raise ValueError(
                    f"{path}:{number}: expected 'seconds path', got {line!r}; regenerate it with "
                    f"python3 tests/slow_files_first.py <junit.xml>"
                ) from None
    return weights


def file_of(nodeid: str) -> str:
    """The test file of a node id (`tests/a/test_b.py::test_c[x]` -> `tests/a/test_b.py`)."""
    return nodeid.split("::", 1)[0]


def slowest_first(nodeids: list[str], weights: dict[str, float]) -> list[int]:
    """The positions of `nodeids` reordered file by file: files missing from `weights` first (in
    collection order), then the others by seconds, longest first; a file's tests keep their order."""
    by_file: dict[str, list[int]] = collections.defaultdict(list)
    for position, nodeid in enumerate(nodeids):
        by_file[file_of(nodeid)].append(position)
    files = list(by_file)  # collection order of each file's first test
    unknown = [name for name in files if name not in weights]
    known = sorted((name for name in files if name in weights), key=lambda n: -weights[n])
    return [position for name in unknown + known for position in by_file[name]]


def pytest_collection_modifyitems(session, config, items):
    weights = read_weights()
    order = slowest_first([item.nodeid for item in items], weights)
    items[:] = [items[i] for i in order]


def seconds_per_file(junit_xml: str) -> dict[str, float]:
    """Each test file's total seconds in a JUnit XML report (pytest's `--junitxml`)."""
    totals: dict[str, float] = collections.defaultdict(float)
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        # pytest's classname is the dotted module path, then the class if any: tests.a.test_b.C
        parts = case.get("classname", "").split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            totals["/".join(parts) + ".py"] += float(case.get("time", 0))
    return dict(totals)


def write_weights(totals: dict[str, float], path: str | None = None) -> None:
    """Writes `totals` as the list `read_weights` reads, longest first (to `WEIGHTS` by default)."""
    with open(path or WEIGHTS, "w", encoding="utf-8") as f:
        f.write("# Seconds per test file in a full run (tests/slow_files_first.py reads it).\n")
        ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
        f.writelines(f"{seconds:.1f} {name}\n" for name, seconds in ranked)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: python3 {argv[0]} <junit.xml from a full run>", file=sys.stderr)
        return 2
    write_weights(seconds_per_file(argv[1]))
    print(f"wrote {WEIGHTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

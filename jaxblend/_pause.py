"""Test hook: stop a process at a named point so a test can kill it there (`kill -9`).

Set `JAXBLEND_PAUSE_AT=<point>:<count>` in a child process's environment. When the code reaches
`pause_point(<point>, <count>)` it prints `jaxblend paused at <point>:<count>` on stderr and sleeps
until killed. Unset (always, outside such tests) it costs one environment lookup.

Points: `cache-write` (index cache entry, count = arrays already written; count = number of arrays
means all arrays written, manifest and rename not yet), `merge` (preprocessing's final merge,
count = parts merged into the first output so far), `partition` (a preprocessing worker about to
process the partition of that index).
"""

from __future__ import annotations

import os
import sys
import time

ENV = "JAXBLEND_PAUSE_AT"


def pause_point(point: str, count: int) -> None:
    """Pauses forever if `JAXBLEND_PAUSE_AT` names this point and count."""
    if os.environ.get(ENV) == f"{point}:{count}":
        print(f"jaxblend paused at {point}:{count}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)

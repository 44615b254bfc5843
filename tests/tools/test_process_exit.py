"""`exit_now`: a tool's process ends with its code after its threads, exit handlers and output
are done (a real process: its end is the point)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import atexit, concurrent.futures, os, sys, threading, time, weakref
    from jaxblend.tools._process_exit import exit_now

    out = sys.argv[1]
    atexit.register(lambda: open(os.path.join(out, "atexit"), "w").write("ran"))
    class Holder: pass
    holder = Holder()
    weakref.finalize(holder, lambda: open(os.path.join(out, "finalized"), "w").write("ran"))

    def late():
        time.sleep(0.5)
        open(os.path.join(out, "thread"), "w").write("ran")

    threading.Thread(target=late).start()  # non-daemon: joined before the exit
    pool = concurrent.futures.ThreadPoolExecutor(2)  # left open: its idle workers are stopped
    pool.submit(lambda: None).result()
    sys.stdout.write("no newline at the end")
    sys.stderr.write("nor here")
    exit_now(3)
""")


def test_exit_now_runs_what_an_exit_runs_then_ends(tmp_path):
    script = tmp_path / "tool.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT}, check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "no newline at the end" and done.stderr == "nor here"
    for name in ("atexit", "finalized", "thread"):
        assert (out / name).read_text() == "ran", name

"""`jaxblend.tools._own_process`, in fresh processes (what a process has imported, and how it
ends, is the point): Grain imported without Orbax and Orbax importable after, the ordinary import
for a Grain that needs Orbax; `exit_now` ends with its code after the process's threads, exit
handlers and output are done."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script: str, *paths: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, ROOT])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_grain_without_orbax_then_orbax_on_demand():
    out = _run("""
        import sys
        from jaxblend.tools._own_process import import_grain_without_orbax
        import_grain_without_orbax()
        print("grain" in sys.modules, "orbax.checkpoint" in sys.modules)
        import grain
        from jaxblend.loading import make_loader  # the loader's Grain is this one
        import orbax.checkpoint as ocp
        print(ocp.__name__, hasattr(ocp, "CheckpointManager"))
    """)
    assert out.split() == ["True", "False", "orbax.checkpoint", "True"]


def test_a_grain_that_needs_orbax_is_imported_the_ordinary_way(tmp_path):
    fake = tmp_path / "grain"
    fake.mkdir()
    (fake / "__init__.py").write_text("import orbax.checkpoint\nWITH_ORBAX = True\n")
    out = _run("""
        import sys
        from jaxblend.tools._own_process import import_grain_without_orbax
        import_grain_without_orbax()
        import grain
        print(grain.WITH_ORBAX, sys.modules["orbax.checkpoint"] is not None)
    """, str(tmp_path))
    assert out.split() == ["True", "True"]

SCRIPT = textwrap.dedent("""
    import atexit, concurrent.futures, os, sys, threading, time, weakref
    from jaxblend.tools._own_process import exit_now

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


def test_dump_batches_in_its_own_process_never_imports_orbax(tmp_path):
    out = _run(f"""
        import atexit, runpy, sys
        atexit.register(lambda: print("orbax imported:", "orbax.checkpoint" in sys.modules))
        sys.argv = ["dump_batches", "--mock_data", "--seq_length=16", "--mock_num_samples=64",
                    "--global_batch_size=8", "--steps=2", "--num_cpu_devices=1",
                    "--out={tmp_path / 'out'}"]
        runpy.run_module("jaxblend.tools.dump_batches", run_name="__main__")
    """)
    assert out.splitlines()[-1] == "orbax imported: False", out
    assert (tmp_path / "out" / "batches.npz").exists()

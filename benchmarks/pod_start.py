"""Pod start from a bucket: what one training host pays before its first batch, old path vs new.

  /work/main/.venv/bin/python benchmarks/pod_start.py --old_tree /work/prev --new_tree /work/main
  /work/main/.venv/bin/python benchmarks/pod_start.py --old_tree /work/prev --new_tree /work/main \
      --sizes 1e8:1000,1e8:10000,1e8:100000 --hosts 0   # start against the number of prefixes
  /work/main/.venv/bin/python benchmarks/pod_start.py --quick --old_tree /work/prev \
      --new_tree /work/prev                                    # about a minute, for trying it

A corpus of lognormal-length documents (uint16 ids < 50,000, benchmarks/_corpus.py) per size is
written once under `--data_dir` and uploaded once to a fake-gcs-server with its filesystem backend
(benchmarks/_pod_bucket.py), which every tool reaches through a latency proxy adding `--delay_ms`
per request and counting requests and response-body bytes (benchmarks/_counting_proxy.py). For
each size and each side (the `--old_tree` and `--new_tree` checkouts, each run as separate
processes with `PYTHONPATH=<tree>` in a scratch directory; each child prints the jaxblend it
imported and the run stops if it is not its tree's):

1. build: `jaxblend.tools.build_index` once over the blend of every prefix (equal weights, seq
   `--seq_length`, split 99,1,0, train samples for `--steps` steps of `--global_batch_size` plus
   10%), publishing to `gs://<bucket>/runs/<run>/<side>/cache`: wall time, bytes read/written.
2. fresh host: `jaxblend.tools.dump_batches` for 1 step, then (again fresh) for `--steps` steps,
   each with empty local state (identity memo, map mirror, XDG cache and TMPDIR in new empty
   directories: benchmarks/_pod_child.py): time from process start to the first batch (the child
   prints a timestamp when the loader hands it over), bytes/requests through the proxy until then
   (counters read when that line arrives) and over the whole run, peak RSS (`os.wait4`); the
   1-step run's batch is hashed, so the report says whether both sides gave the same bytes.
3. P hosts at once (`--hosts`, `jaxblend.tools.launch_local`, 1 CPU device each) on a cache URL
   where nothing is published: total bytes/requests and the time until every process has its
   first batch.

dump_batches keeps only the first row of each gathered batch (`POD_CHILD_ROWS=1`, see
benchmarks/_pod_child.py), so its peak RSS is the loader's, not 100 stored batches'. A tree whose
tools need other flags gets them with `--old_build_flags` / `--new_host_flags` & co.

Sizes of 100,000 prefixes are small datasets (1e8 tokens: ~1,000 tokens, one or two documents,
each): writing that corpus takes ~3 minutes and uploading its 200,000 objects ~15-20 minutes on
a loaded 2-core machine (`--prepare_only` does both ahead of a run); every build then opens
100,000 datasets. The report's growth table compares every prefix step at one token count
(1,000 -> 10,000 -> 100,000, and first -> last).

Token bytes = steps x global batch x (seq + 1) x 2 bytes: the tokens the batches hold. Results go
to `<data_dir>/pod_start-<run>.json`; the markdown report is printed (and can be re-rendered with
`--report a.json,b.json`, which also merges runs of the same settings).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _counting_proxy import CountingProxy, Counts
from _pod_report import report

CHILD = str(HERE / "_pod_child.py")


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """`1e8:1000,1e9:10000` -> [(tokens, prefixes), ...]."""
    out = []
    for item in text.split(","):
        tokens, prefixes = item.split(":")
        out.append((int(float(tokens)), int(prefixes)))
    return out


class Child:
    """One benchmarked process (or launcher of several) whose output is watched line by line.

    At each `POD_FIRST_BATCH` line the proxy's counters are read (the bytes before that process's
    first batch).
    """

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: str, proxy: CountingProxy,
                 log: Path):
        self.proxy = proxy
        self.lines: list[str] = []
        self.first_batches: list[tuple[float, Counts, int]] = []  # (time, counts, maxrss kb)
        self.final_rss_kb: list[int] = []
        self.imports: list[str] = []
        self._log = log.open("w")
        self.started = time.time()
        self.process = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            self._log.write(line)
            self.lines.append(line)
            if "POD_FIRST_BATCH" in line:
                counts = self.proxy.counts()
                words = line.split("POD_FIRST_BATCH", 1)[1].split()
                self.first_batches.append((float(words[0]), counts, int(words[1].split("=")[1])))
            elif "POD_BATCHES" in line:
                self.final_rss_kb.append(int(line.rsplit("maxrss_kb=", 1)[1]))
            elif "POD_CHILD jaxblend=" in line:
                self.imports.append(line.split("POD_CHILD jaxblend=", 1)[1].strip())
        self._log.close()

    def wait(self, timeout: float) -> tuple[int, int]:
        """(exit code, peak RSS in KB of the direct child) once it ended; kills it at `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(self.process.pid, 9)
                pid, status, usage = os.wait4(self.process.pid, 0)
                break
            time.sleep(0.05)
        self.process.returncode = os.waitstatus_to_exitcode(status)
        self._thread.join(30)
        return self.process.returncode, usage.ru_maxrss

    def tail(self, n: int = 30) -> str:
        return "".join(self.lines[-n:])


class Bench:
    """Runs the phases of one side at one size."""

    def __init__(self, args, proxy: CountingProxy, server, scratch: Path, data_args: Path,
                 run_id: str):
        self.args, self.proxy, self.server = args, proxy, server
        self.scratch, self.data_args, self.run_id = scratch, data_args, run_id

    def env(self, tree: str, state: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXBLEND_", "XLA_"))}
        env.update(self.server.environ(self.proxy.url))
        env.update(PYTHONPATH=tree, JAX_PLATFORMS="cpu", POD_CHILD_STATE=str(state),
                   PYTHONUNBUFFERED="1", POD_CHILD_ROWS="1")
        return env

    def data_flags(self, cache: str) -> list[str]:
        a = self.args
        return [
            f"--data_args_path={self.data_args}", f"--split={a.split}", f"--seq_length={a.seq_length}",
            f"--train_samples={train_samples(a)}",
            f"--valid_samples={a.global_batch_size if float(a.split.split(',')[1]) else 0}",
            "--test_samples=0", f"--data_cache_path={cache}",
        ]

    def run(self, name: str, tree: str, module_args: list[str], launcher: list[str] | None = None,
            expect_processes: int = 1, whole_batches: bool = False) -> dict:
        work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.scratch))
        cmd = [self.args.python, CHILD, *module_args]
        if launcher:
            cmd = [self.args.python, "-m", "jaxblend.tools.launch_local", *launcher, "--", *cmd]
        env = self.env(tree, work / "state")
        if whole_batches:
            env.pop("POD_CHILD_ROWS")
        self.proxy.reset()
        child = Child(cmd, env, str(work), self.proxy, work / "output.log")
        # A launcher stops its processes at its own --timeout (they run in sessions of their own,
        # out of reach of a kill of the launcher's group), so it gets a minute more here.
        code, rss_kb = child.wait(self.args.timeout + (60 if launcher else 0))
        total = self.proxy.counts()
        ended = time.time()
        result = {
            "phase": name, "code": code, "seconds": ended - child.started,
            "requests": total.requests, "read_bytes": total.body_bytes,
            "written_bytes": total.sent_bytes, "bin_bytes": total.bin_bytes,
            "idx_bytes": total.idx_bytes, "peak_rss_mb": rss_kb / 1024, "log": str(work),
        }
        if whole_batches and code == 0:
            result["batch_sha256"] = batches_digest(work / "out" / "batches.npz")
        for leftover in ("out", "state"):  # keep output.log only
            shutil.rmtree(work / leftover, ignore_errors=True)
        bad = [p for p in child.imports if not p.startswith(os.path.realpath(tree))]
        if bad or len(child.imports) != expect_processes:
            raise SystemExit(f"{name}: expected {expect_processes} process(es) importing jaxblend "
                             f"from {tree}, saw {child.imports}; output in {work}/output.log")
        if code != 0:
            print(f"  {name}: FAILED (exit {code}); output in {work}/output.log\n"
                  f"{child.tail()}", flush=True)
            result["error"] = child.tail(5)
            return result
        if not child.first_batches and module_args[0].endswith("dump_batches"):
            print(f"  {name}: no first-batch line (did the tool stop calling "
                  f"jaxblend.loading.make_loader?); output in {work}/output.log", flush=True)
        elif child.first_batches:
            times = [t for t, _, _ in child.first_batches]
            result["first_batch_s"] = max(times) - child.started
            first = min(child.first_batches, key=lambda x: x[0])
            result["first_requests"] = first[1].requests
            result["first_read_bytes"] = first[1].body_bytes
            result["first_bin_bytes"] = first[1].bin_bytes
            result["first_idx_bytes"] = first[1].idx_bytes
            result["first_rss_mb"] = max(r for _, _, r in child.first_batches) / 1024
        if child.final_rss_kb:
            result["peak_rss_all_mb"] = max(child.final_rss_kb) / 1024
        return result

    def side(self, side: str, tree: str) -> dict:
        a = self.args
        base = f"runs/{a.reuse_build or self.run_id}/{side}"
        cache = self.server.prefix_url(f"{base}/cache")
        out: dict = {"side": side, "tree": tree}
        build_extra = shlex.split(getattr(a, f"{side}_build_flags"))
        host_extra = shlex.split(getattr(a, f"{side}_host_flags"))
        if "build" in a.phases.split(","):
            print(f"  {side}: build", flush=True)
            out["build"] = self.run(f"{side}-build", tree, ["jaxblend.tools.build_index",
                                                            *self.data_flags(cache), *build_extra])
        else:
            print(f"  {side}: no build; the publication of run {a.reuse_build}", flush=True)
        if "host1" not in a.phases.split(","):
            return out
        dump = ["jaxblend.tools.dump_batches", *self.data_flags(cache),
                f"--global_batch_size={a.global_batch_size}", *host_extra]
        print(f"  {side}: fresh host, 1 step", flush=True)
        out["host1"] = self.run(f"{side}-host1", tree, [*dump, "--steps=1", "--out=out"],
                                whole_batches=True)
        if "host" in a.phases.split(","):
            print(f"  {side}: fresh host, {a.steps} steps", flush=True)
            out["host"] = self.run(f"{side}-host{a.steps}", tree,
                                   [*dump, f"--steps={a.steps}", "--out=out"])
        if a.hosts:
            print(f"  {side}: {a.hosts} hosts at once, nothing published", flush=True)
            p_dump = ["jaxblend.tools.dump_batches",
                      *self.data_flags(self.server.prefix_url(f"{base}/pcache")),
                      f"--global_batch_size={a.global_batch_size}", "--steps=1", "--out=out",
                      *host_extra]
            out["pod"] = self.run(
                f"{side}-p{a.hosts}", tree, p_dump,
                launcher=[f"--num_processes={a.hosts}", "--devices_per_process=1",
                          f"--timeout={a.timeout}"],
                expect_processes=a.hosts,
            )
        return out


def batches_digest(path: Path) -> str | None:
    """SHA-256 over the arrays of a dump_batches file (key order), None if it is missing."""
    import numpy as np

    if not path.exists():
        return None
    digest = hashlib.sha256()
    with np.load(path) as arrays:
        for key in sorted(arrays.files):
            value = arrays[key]
            digest.update(f"{key}:{value.dtype.str}:{value.shape}".encode())
            digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def train_samples(args) -> int:
    return int(args.steps * args.global_batch_size * 1.1)


def token_bytes(args, steps: int) -> int:
    return steps * args.global_batch_size * (args.seq_length + 1) * 2


def run_size(args, tokens: int, prefixes: int, run_id: str, sides: list[tuple[str, str]]) -> dict:
    from _pod_bucket import DiskGcsServer, corpus_key, local_corpus, upload_corpus

    data_dir = Path(args.data_dir)
    key = corpus_key(tokens, prefixes)
    print(f"size {key}", flush=True)
    local = local_corpus(data_dir, tokens, prefixes)
    real_tokens = sum(Path(p + ".bin").stat().st_size // 2 for p in local)
    root = data_dir / f"gcs-{key}"
    server = DiskGcsServer.start_on_disk(root)
    try:
        urls = upload_corpus(server, root, local, f"corpus-{key}")
        if args.prepare_only:
            return {}
        scratch = Path(tempfile.mkdtemp(prefix=f"pod_start-{key}-", dir=args.scratch))
        data_args = scratch / "blend.txt"
        data_args.write_text("\n".join(f"1 {u}" for u in urls) + "\n")
        with CountingProxy(server.url, args.delay_ms / 1000) as proxy:
            bench = Bench(args, proxy, server, scratch, data_args, run_id)
            results = [bench.side(side, tree) for side, tree in sides]
    finally:
        server.stop()
    return {"tokens": real_tokens, "nominal_tokens": tokens, "prefixes": prefixes,
            "sides": results}


def merge_results(runs: list[dict]) -> dict:
    """One results dict from runs of the same settings (their sizes in order).

    Raises:
      ValueError: if the runs differ in delay, sequence, batch, steps or trees.
    """
    first = runs[0]
    fixed = ("delay_ms", "seq_length", "global_batch_size", "steps", "trees")
    for run in runs[1:]:
        differ = [k for k in fixed if run["config"][k] != first["config"][k]]
        if differ or run["commits"] != first["commits"]:
            raise ValueError(f"run {run['run_id']} differs from {first['run_id']} in "
                             f"{differ or ['commits']}: report them apart")
    merged = dict(first, sizes=[size for run in runs for size in run["sizes"]])
    merged["run_id"] = ", ".join(run["run_id"] for run in runs)
    merged["config"] = dict(first["config"], hosts=max(r["config"]["hosts"] for r in runs))
    return merged


def _commit(tree: str) -> str:
    try:
        return subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old_tree", default="/work/prev")
    parser.add_argument("--new_tree", default="/work/main")
    parser.add_argument("--sides", default="old,new", help="which of old,new to run, in order")
    for side in ("old", "new"):
        parser.add_argument(f"--{side}_build_flags", default="",
                            help=f"extra flags for build_index of the {side} tree (one string)")
        parser.add_argument(f"--{side}_host_flags", default="",
                            help=f"extra flags for dump_batches of the {side} tree (one string)")
    parser.add_argument("--sizes", default="1e8:1000,1e9:1000,1e9:10000",
                        help="tokens:prefixes,... (1e10:1000 when it fits on disk)")
    parser.add_argument("--quick", action="store_true", help="1e7 tokens over 100 prefixes, 10 steps")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter of both sides' processes (their PYTHONPATH picks the tree)")
    parser.add_argument("--data_dir", default="/work/bench-data",
                        help="corpora and the bucket's disk (1e9 tokens: 4 GB per size; 1e10: 40 GB)")
    parser.add_argument("--scratch", default=None, help="default: <data_dir>/scratch")
    parser.add_argument("--delay_ms", type=float, default=20.0)
    parser.add_argument("--seq_length", type=int, default=2048)
    parser.add_argument("--global_batch_size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--hosts", type=int, default=4, help="P; 0 skips that phase")
    parser.add_argument("--split", default="99,1,0",
                        help="100,0,0 for datasets too small to give every split a document "
                             "(e.g. 1e8 tokens over 10,000 prefixes or more); no valid samples")
    parser.add_argument("--phases", default="build,host1,host",
                        help="build,host1 skips the --steps run (its columns stay empty)")
    parser.add_argument("--reuse_build", default=None,
                        help="the run id of an earlier run whose build (its bucket cache) the hosts "
                             "use; with --phases lacking build, the slow 100,000-prefix build can "
                             "run apart (e.g. under load) and the hosts later on an idle machine")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per process, seconds")
    parser.add_argument("--report", default=None,
                        help="only print the report of these results JSONs (comma-separated runs "
                             "of the same settings, e.g. one per size)")
    parser.add_argument("--prepare_only", action="store_true",
                        help="only write and upload the corpora of --sizes (cached for later runs)")
    args = parser.parse_args()
    if args.reuse_build is None and "build" not in args.phases.split(","):
        parser.error("--phases without build needs --reuse_build=<run id of the build>")
    if args.report:
        print(report(merge_results([json.loads(Path(p).read_text())
                                    for p in args.report.split(",")])))
        return
    if args.quick:
        args.sizes, args.steps = "1e7:100", 10
    trees = {"old": args.old_tree, "new": args.new_tree}
    sides = [(s, os.path.realpath(trees[s])) for s in args.sides.split(",")]
    data_dir = Path(args.data_dir)
    args.scratch = args.scratch or str(data_dir / "scratch")
    Path(args.scratch).mkdir(parents=True, exist_ok=True)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    results = {
        "run_id": run_id,
        "config": {"delay_ms": args.delay_ms, "seq_length": args.seq_length, "split": args.split,
                   "global_batch_size": args.global_batch_size, "steps": args.steps,
                   "hosts": args.hosts, "trees": dict(sides)},
        "commits": {side: _commit(tree) for side, tree in sides},
        "sizes": [],
    }
    out = data_dir / f"pod_start-{run_id}.json"
    for tokens, prefixes in parse_sizes(args.sizes):
        size = run_size(args, tokens, prefixes, run_id, sides)
        if args.prepare_only:
            continue
        results["sizes"].append(size)
        out.write_text(json.dumps(results, indent=1))
    if args.prepare_only:
        return
    print(f"\nresults: {out}\n")
    print(report(results))


if __name__ == "__main__":
    main()

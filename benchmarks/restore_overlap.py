"""Resume from a bucket: time from process start to the first trained step, trees side by side.

  /work/main/.venv/bin/python benchmarks/restore_overlap.py \
      --trees old=/work/prev-restore,new=/work/main

A corpus of lognormal-length documents (benchmarks/_corpus.py, `--tokens` over `--prefixes`) is
written once under `--data_dir` and uploaded to a fake-gcs-server (benchmarks/_pod_bucket.py) that
every process reaches through a latency proxy adding `--delay_ms` per request and counting
requests and bytes (benchmarks/_counting_proxy.py). The data, its index-map cache and the
checkpoints are all `gs://` URLs; the checkpoint's requests wait `--checkpoint_delay_ms` instead
(default: `--delay_ms`) and are counted apart.

The overlap can only pay where the restore waits on the store while the compilation and the
first batch have CPU to use. Orbax's OCDBT layout does not make more requests for more arrays: a
checkpoint of 10 or of 200 small arrays was opened, read at its resume point and restored in
44-57 requests through this proxy. The arrays' restore alone took 2.3 s at 200 ms per request
(about 11 requests one after the other), 0.7-1.4 s at 20 ms: it waits about 11 x the
checkpoint's latency, which `--checkpoint_delay_ms` sets (e.g. 200 ms: a store far from the
host) while the data is read at `--delay_ms`. More layers (`--num_layers`) mostly add
compilation (48 layers: 5 minutes to compile the initialization at load 25), not requests.

Set-up (not timed): each tree (a `name=path` of `--trees`, a checkout run with
`PYTHONPATH=<path>`) trains `--steps` steps and saves a checkpoint there (model, AdamW state,
loader state) in a directory of its own, with its own index-map cache: two trees whose data
streams differ (another source fingerprint) refuse each other's loader state. Then, `--repeats`
times and rotating which side goes first, each side resumes its checkpoint in a fresh process
(`jaxblend.train` through benchmarks/_pod_child.py: empty local state, a line when the loader
hands over its first batch) and trains one step without saving, so every run of a side restores
the same checkpoint, of the same size on both sides. Per run: seconds from process start to the
first trained step's log line (the loss is read back from the device there), the same from the
moment jaxblend is imported (the child's first line; imports alone vary by tens of seconds on a
loaded machine), to the loader's first batch, to the "resumed from" line, and the requests and
bytes through the proxy. The table gives
each side's median and its ratio to the first side's median; results go to
`<data_dir>/restore_overlap-<time>.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _counting_proxy import CountingProxy

CHILD = str(HERE / "_pod_child.py")
_STEP_LINE = re.compile(r"^step\s+(\d+)\s+loss\s+([0-9.]+)")


class Run:
    """One `jaxblend.train` process whose output is timed line by line."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: str, log: Path):
        self.marks: dict[str, float] = {}
        self.loss: str | None = None
        self.imported: str | None = None
        self.lines: list[str] = []
        self.started = time.perf_counter()
        self.process = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self._log = log.open("w")
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            now = time.perf_counter() - self.started
            self._log.write(f"{now:8.3f} {line}")
            self.lines.append(line)
            if "POD_CHILD jaxblend=" in line:
                self.imported = line.split("POD_CHILD jaxblend=", 1)[1].strip()
                self.marks.setdefault("imported_s", now)
            elif "POD_FIRST_BATCH" in line:
                self.marks.setdefault("first_batch_s", now)
            elif line.startswith("resumed from"):
                self.marks.setdefault("resumed_s", now)
            elif (match := _STEP_LINE.match(line)) and "first_step_s" not in self.marks:
                self.marks["first_step_s"] = now
                self.loss = match.group(2)
        self._log.close()

    def wait(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._thread.join(30)
        self.marks["exit_s"] = time.perf_counter() - self.started
        return code


def _env(server, proxy_url: str, tree: str, state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXBLEND_", "XLA_"))}
    env.update(server.environ(proxy_url))
    env.update(PYTHONPATH=tree, JAX_PLATFORMS="cpu", POD_CHILD_STATE=str(state),
               PYTHONUNBUFFERED="1")
    return env


def _train_flags(args, blend: Path, base: str) -> list[str]:
    return [
        f"--data_args_path={blend}", "--split=100,0,0", f"--seq_length={args.seq_length}",
        f"--global_batch_size={args.global_batch_size}",
        f"--train_samples={(args.steps + 1) * args.global_batch_size}",
        f"--data_cache_path={base}/cache", f"--checkpoint_dir={base}/checkpoints",
        f"--vocab_size={args.vocab_size}", "--eod_id=0", f"--hidden_size={args.hidden_size}",
        f"--ffn_hidden_size={4 * args.hidden_size}", f"--num_layers={args.num_layers}",
        f"--num_attention_heads={args.num_heads}", "--eval_interval=0", "--log_interval=100",
        f"--workdir={args.scratch}/workdir", "--num_cpu_devices=1", *shlex.split(args.extra_flags),
    ]


def _run(args, server, proxy, name: str, tree: str, flags: list[str], scratch: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
    cmd = [args.python, CHILD, "jaxblend.train", *flags]
    proxy.reset()
    run = Run(cmd, _env(server, proxy.url, tree, work / "state"), str(work), work / "output.log")
    try:
        code = run.wait(args.timeout)
    except BaseException:  # interrupted: the child goes too
        run.process.kill()
        raise
    counts = proxy.counts()
    if code != 0:
        raise SystemExit(f"{name}: exit {code}; output in {work}/output.log\n"
                         + "".join(run.lines[-20:]))
    if run.imported is None or not run.imported.startswith(os.path.realpath(tree)):
        raise SystemExit(f"{name}: imported jaxblend from {run.imported}, not {tree}")
    return {"run": name, **run.marks, "loss": run.loss, "requests": counts.requests,
            "read_bytes": counts.body_bytes, "checkpoint_requests": counts.part_requests,
            "checkpoint_bytes": counts.part_bytes, "log": str(work / "output.log")}


def _report(results: dict) -> str:
    config = results["config"]
    sides = list(config["trees"])
    rows = {side: [r for r in results["runs"] if r["run"].rsplit("-", 1)[0] == side]
            for side in sides}

    def median(side: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[side])

    checkpoint_ms = config.get("checkpoint_delay_ms")
    header = (
        f"{config['delay_ms']:g} ms per request"
        + ("" if checkpoint_ms in (None, config["delay_ms"])
           else f" ({checkpoint_ms:g} ms to the checkpoint)")
        + f"; model d={config['hidden_size']} x "
        f"{config['num_layers']} layers, vocab {config['vocab_size']}; batch "
        f"{config['global_batch_size']} x {config['seq_length']} tokens; {config['repeats']} runs "
        "per side (median, then each run); "
        + ", ".join(f"{side} {results['commits'][side]}" for side in sides)
    )
    first = sides[0]
    lines = [
        header, "",
        "| | " + " | ".join(sides) + " | " + " | ".join(f"{s}/{first}" for s in sides[1:]) + " |",
        "|---" * (2 * len(sides)) + "|",
    ]
    timed = [("first_step_s", "process start -> first trained step, s"),
             ("first_batch_s", "process start -> first batch handed over, s"),
             ("resumed_s", "process start -> \"resumed from\" line, s"),
             ("exit_s", "process start -> exit, s")]
    if all("imported_s" in r for r in results["runs"]):  # imports vary most on a loaded machine
        for r in results["runs"]:
            r["after_imports_s"] = r["first_step_s"] - r["imported_s"]
        timed.insert(1, ("after_imports_s", "jaxblend imported -> first trained step, s"))
    for key, label in timed:
        cells = [f"{median(s, key):.2f} ({' '.join(f'{r[key]:.2f}' for r in rows[s])})"
                 for s in sides]
        ratios = [f"{median(s, key) / median(first, key):.2f}" for s in sides[1:]]
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    counted = [("requests", "requests through the proxy", 1),
               ("read_bytes", "bytes read through the proxy, MB", 1e6)]
    if all("checkpoint_requests" in r for r in results["runs"]):
        counted += [("checkpoint_requests", "of which to the checkpoint directory", 1),
                    ("checkpoint_bytes", "bytes read from the checkpoint directory, MB", 1e6)]
    for key, label, scale in counted:
        cells = [f"{median(s, key) / scale:,.1f}" for s in sides]
        ratios = [f"{median(s, key) / median(first, key):.2f}" for s in sides[1:]]
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    losses = "; ".join(f"{side} {sorted({r['loss'] for r in rows[side]})}" for side in sides)
    lines += ["", f"first-step losses of every run: {losses} (one value a side: the same step)"]
    return "\n".join(lines)


def _commit(tree: str) -> str:
    return subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], text=True,
                          capture_output=True, check=False).stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default="old=/work/prev-restore,new=/work/main",
                        help="name=checkout,... (the first is the baseline of the ratios)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--data_dir", default="/work/bench-data")
    parser.add_argument("--tokens", type=float, default=4e6)
    parser.add_argument("--prefixes", type=int, default=4)
    parser.add_argument("--delay_ms", type=float, default=20.0)
    parser.add_argument("--checkpoint_delay_ms", type=float, default=None,
                        help="per request to the checkpoint directory (default: --delay_ms)")
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--global_batch_size", type=int, default=8)
    parser.add_argument("--vocab_size", type=int, default=50304)
    parser.add_argument("--hidden_size", type=int, default=64)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="the checkpoint's step")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=0,
                        help="untimed resumes per tree first (a checkout's first run compiles "
                             "Numba's kernels into its __pycache__, minutes on a loaded machine)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--report", default=None, help="only print the report of this JSON")
    parser.add_argument("--extra_flags", default="", help="more flags for every training run")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    if args.report:
        print(_report(json.loads(Path(args.report).read_text())))
        return

    from _pod_bucket import DiskGcsServer, corpus_key, local_corpus, upload_corpus

    data_dir = Path(args.data_dir)
    trees = {name: os.path.realpath(path) for name, path in
             (item.split("=", 1) for item in args.trees.split(","))}
    sides = list(trees)
    key = corpus_key(int(args.tokens), args.prefixes)
    local = local_corpus(data_dir, int(args.tokens), args.prefixes)
    root = data_dir / f"gcs-{key}"
    run_id = time.strftime("%Y%m%d-%H%M%S")
    scratch = Path(tempfile.mkdtemp(prefix=f"restore_overlap-{run_id}-", dir=data_dir))
    args.scratch = str(scratch)
    server = DiskGcsServer.start_on_disk(root)
    try:
        urls = upload_corpus(server, root, local, f"corpus-{key}")
        blend = scratch / "blend.txt"
        blend.write_text("\n".join(f"1 {u}" for u in urls) + "\n")
        base = server.prefix_url(f"runs/restore_overlap-{run_id}")
        flags = {side: _train_flags(args, blend, f"{base}/{side}") for side in sides}
        resume = {side: [*flags[side], f"--train_iters={args.steps + 1}", "--save_interval=0"]
                  for side in sides}
        if args.checkpoint_delay_ms is None:
            args.checkpoint_delay_ms = args.delay_ms
        # Only the checkpoint directories' object names (and listings) hold "/checkpoints".
        with CountingProxy(server.url, args.delay_ms / 1000, part="/checkpoints",
                           part_delay=args.checkpoint_delay_ms / 1000) as proxy:
            for side in sides:
                print(f"set-up: {args.steps} steps and a checkpoint ({trees[side]})", flush=True)
                _run(args, server, proxy, f"setup-{side}", trees[side],
                     [*flags[side], f"--train_iters={args.steps}",
                      f"--save_interval={args.steps}"], scratch)
            for side in sides * args.warmup:
                _run(args, server, proxy, f"warmup-{side}", trees[side], resume[side], scratch)
            runs = []
            for k in range(args.repeats):
                for side in sides[k % len(sides):] + sides[:k % len(sides)]:
                    result = _run(args, server, proxy, f"{side}-{k}", trees[side], resume[side],
                                  scratch)
                    print(f"  {side} run {k}: first step at {result['first_step_s']:.2f} s, "
                          f"first batch at {result['first_batch_s']:.2f} s", flush=True)
                    runs.append(result)
    finally:
        server.stop()
    results = {
        "run_id": run_id,
        "config": {**{k: getattr(args, k) for k in (
            "delay_ms", "checkpoint_delay_ms", "seq_length", "global_batch_size", "vocab_size", "hidden_size",
            "num_layers", "steps", "repeats", "tokens", "prefixes")}, "trees": trees},
        "commits": {side: _commit(tree) for side, tree in trees.items()},
        "runs": runs,
    }
    out = data_dir / f"restore_overlap-{run_id}.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"\nresults: {out}\n\n{_report(results)}")


if __name__ == "__main__":
    main()

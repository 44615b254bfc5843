"""The training example end to end: built-in corpus, falling loss, checkpoints, 2-process resume."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from helpers_cli import run_tool
from helpers_multiproc import Job

from jaxblend.training import corpus

pytestmark = pytest.mark.slow

SMALL = [
    "--flagfile=configs/demo.flags", "--default_corpus_mb=0.25", "--seq_length=64",
    "--global_batch_size=8", "--hidden_size=64", "--ffn_hidden_size=128", "--num_layers=1",
    "--log_interval=5", "--eval_interval=0", "--lr_warmup_iters=5",
    "--train_samples=400",  # fixed data order: extending --train_iters keeps the same stream
]
# The model most tests train: one shape, compiled once for all of them (JAX's caches).
TINY = [
    "--mock_data", "--seq_length=16", "--global_batch_size=8", "--eval_interval=0",
    "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1", "--num_attention_heads=2",
    "--mock_num_samples=512", "--mock_vocab_size=128", "--vocab_size=128", "--keep_checkpoints=50",
]


def losses(output: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"step\s+(\d+)\s+loss\s+([0-9.]+)", output)}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("train")


def test_demo_builds_corpus_and_loss_falls(workdir):
    out = run_tool("jaxblend.train", [*SMALL, f"--workdir={workdir}",
         "--train_iters=40", "--save_interval=20"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    curve = losses(out.stdout)
    assert sorted(curve) == [1, 5, 10, 15, 20, 25, 30, 35, 40]
    assert curve[40] < curve[1] - 1.0 and curve[40] < curve[5], curve
    corpus_dir = workdir / f"corpus-v{corpus.VERSION}-250000"
    for name in ("code", "prose", "legal"):
        assert (corpus_dir / f"{name}_text_document.bin").exists()
    digest = corpus.corpus_digest({n: str(corpus_dir / "raw" / f"{n}.jsonl") for n in corpus.DATASETS})
    assert f"default corpus sha256 {digest}" in out.stdout
    assert re.search(r"samples code_text_document=\d+ prose_text_document=\d+ legal_text_document=\d+", out.stdout)
    assert (workdir / "checkpoints" / "40" / "loader" / "loader_state.json").exists()
    # Not even the preprocessing of the corpus logs INFO lines (only with --verbose).
    assert not _INFO_LINE.search(out.stdout + out.stderr), out.stderr[-3000:]


def test_resume_on_two_processes_through_launch_local_sh(workdir):
    # Continue the 40-step run to 50 steps as 2 JAX processes (4 CPU devices each) started by
    # launch/local.sh: it must resume from the step-40 checkpoint (model, optimizer and loader
    # state), not start over.
    env = {**os.environ, "NUM_PROCESSES": "2", "DEVICES_PER_PROCESS": "4", "PYTHON": sys.executable,
           "FLAGFILE": "configs/demo.flags", "LAUNCH_TIMEOUT": "400"}
    out = subprocess.run(
        ["bash", "launch/local.sh", *SMALL[1:], f"--workdir={workdir}", "--train_iters=50",
         "--save_interval=10", "--mesh_shape=8", "--mesh_axes=data", "--distributed_timeout=60"],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-4000:]
    assert "resumed from" in output and "step 40" in output, output[-3000:]
    curve = losses("\n".join(line[4:] for line in output.splitlines() if line.startswith("[0] ")))
    assert sorted(curve) == [41, 45, 50], output[-3000:]
    assert "finished at step 50" in output
    assert (workdir / "checkpoints" / "50" / "loader" / "loader_state.json").exists()


def test_fsdp_tensor_mesh_and_resume_on_another_mesh(tmp_path):
    # The model of TINY (below): the resumed run on the data mesh compiles what other tests do.
    common = [
        *TINY, "--log_interval=2", "--num_cpu_devices=8", f"--workdir={tmp_path}",
        "--save_interval=3",
    ]
    first = run_tool("jaxblend.train", [*common, "--train_iters=3",
         "--mesh_shape=2,2,2", "--mesh_axes=data,fsdp,tensor"])
    assert first.returncode == 0, first.stderr[-3000:]
    assert "finished at step 3" in first.stdout
    second = run_tool("jaxblend.train", [*common, "--train_iters=6", "--mesh_shape=8",
         "--mesh_axes=data"])
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout and sorted(losses(second.stdout)) == [4, 6]


def test_rampup_batch_size_resumed_mid_ramp_on_another_mesh(tmp_path):
    """Megatron's batch-size ramp-up in training: sizes per step, and a checkpoint taken in the
    middle of the ramp resumes on another mesh exactly where the uninterrupted run went."""
    common = [
        "--mock_data", "--seq_length=16", "--global_batch_size=32", "--log_interval=1",
        "--eval_interval=0", "--save_interval=5", "--keep_checkpoints=3", "--train_iters=12",
        "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1", "--num_attention_heads=2",
        "--mock_num_samples=512", "--mock_vocab_size=128", "--vocab_size=128",
    ]
    batch = re.compile(r"step\s+(\d+)\s+loss\s+([0-9.]+)\s+batch\s+(\d+)")

    def run(workdir, *extra):
        out = run_tool("jaxblend.train", [*common, f"--workdir={workdir}", *extra])
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return out, {int(s): (loss, int(b)) for s, loss, b in batch.findall(out.stdout)}

    # Megatron's spelling of the flag is accepted too.
    _, full = run(tmp_path / "full", "--rampup-batch-size", "8", "8", "64", "--num_cpu_devices=8")
    assert [full[k][1] for k in range(1, 13)] == [8, 8, 8, 16, 16, 24] + [32] * 6
    # Keep only the step-5 checkpoint (mid-ramp: the next step has 24 rows) and resume from it.
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    for step in ("10", "12"):
        shutil.rmtree(tmp_path / "resumed" / "checkpoints" / step)
    # Resumed on another mesh of the 8 devices: the batch split 4 ways, the model 2 ways.
    out, rest = run(tmp_path / "resumed", "--rampup_batch_size=8 8 64", "--mesh_shape=4,2",
                    "--mesh_axes=data,tensor")
    assert "resumed from" in out.stdout and sorted(rest) == list(range(6, 13))
    assert rest == {k: full[k] for k in range(6, 13)}


def test_step_batch_size_schedule_trains_and_validates_at_the_final_size(tmp_path):
    """Megatron's --step-batch-size-schedule in training: each step's size follows the samples
    consumed before it (thresholds in tokens: 192 = 12 samples of 16), and validation runs at the schedule's final size (not the
    --global_batch_size default, which may not divide the mesh)."""
    out = subprocess.run(
        [sys.executable, "-m", "jaxblend.train", "--mock_data", "--seq_length=16",
         "--log_interval=1", "--eval_interval=3", "--eval_iters=1", "--save_interval=0",
         "--train_iters=6", "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1",
         "--num_attention_heads=2", "--mock_num_samples=512", "--mock_vocab_size=128",
         "--vocab_size=128", "--num_cpu_devices=6", f"--workdir={tmp_path}",
         "--step-batch-size-schedule", "0:6 192:12"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    batch = re.compile(r"step\s+(\d+)\s+loss\s+[0-9.]+\s+batch\s+(\d+)")
    sizes = {int(s): int(b) for s, b in batch.findall(out.stdout)}
    assert [sizes[k] for k in range(1, 7)] == [6, 6, 12, 12, 12, 12]
    assert "validation" in out.stdout.lower() or "valid" in out.stdout.lower()


def test_bad_rampup_is_one_line_naming_the_flag(tmp_path):
    out = run_tool("jaxblend.train", ["--mock_data", "--seq_length=16",
         "--global_batch_size=32", "--rampup_batch_size=8 10 64", f"--workdir={tmp_path}"])
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error: --rampup_batch_size='8 10 64'")


_DIVERGED = re.compile(
    r"^error: training diverged at step (\d+): (loss nan|its update left non-finite parameters or "
    r"optimizer state) \(last finite loss [0-9.]+ at step \d+\); lower --lr \(now 10000\), raise "
    r"--lr_warmup_iters \(now \d+\) or lower --clip_grad \(now 1\); then resume from the checkpoint "
    r"at step (\d+) in (\S+) \(rerun with the changed flags\)$"
)


def _all_finite_checkpoints(directory) -> list[int]:
    """The steps in an Orbax checkpoint directory, after checking every saved value is finite."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp
    from etils import epath

    steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    with ocp.PyTreeCheckpointer() as checkpointer:
        for step in steps:
            path = epath.Path(directory / str(step) / "state")
            tree = checkpointer.metadata(path).item_metadata.tree
            as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
            state = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=as_numpy))
            leaves = jax.tree.leaves(state)
            assert leaves and all(np.isfinite(leaf).all() for leaf in leaves), step
    return steps


@pytest.mark.parametrize(
    ("settings", "cause"),
    [
        # Checked at log lines: the first NaN loss stops the run at the next log line; the
        # checkpoints before it (every 3 steps) are kept.
        (["--log_interval=5", "--save_interval=3", "--lr_warmup_iters=2"], "loss nan"),
        # Checked before every save: an update that leaves NaN parameters (after a finite loss)
        # is never saved.
        (["--log_interval=10", "--save_interval=1", "--lr_warmup_iters=30"],
         "its update left non-finite parameters"),
    ],
)
def test_a_diverging_run_stops_with_one_line_and_checkpoints_no_nan(tmp_path, settings, cause):
    out = run_tool("jaxblend.train", [*TINY, *settings, "--train_iters=20",
         "--lr=1e4", f"--workdir={tmp_path}"])
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-3000:]
    assert "finished" not in out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[-3000:]
    match = _DIVERGED.match(lines[0])
    assert match, lines[0]
    diverged, reason, resume, directory = match.groups()
    assert reason.startswith(cause)
    assert directory == str(tmp_path / "checkpoints")
    steps = _all_finite_checkpoints(tmp_path / "checkpoints")
    assert steps and max(steps) == int(resume) < int(diverged), (steps, lines[0])
    if "--save_interval=1" in settings:
        assert steps == list(range(1, int(diverged))), (steps, lines[0])


@pytest.mark.multiprocess
def test_a_diverging_run_stops_every_process(tmp_path):
    # The loss is global: each of 2 processes sees the NaN at the same step and stops itself
    # with the same line (not "process K failed"), exit code 1.
    job = Job(
        [sys.executable, "-m", "jaxblend.train", *TINY, "--log_interval=5", "--save_interval=3",
         "--lr_warmup_iters=2", "--train_iters=20", "--lr=1e4", "--mesh_shape=4",
         "--distributed_timeout=60", f"--workdir={tmp_path}"],
        num_processes=2, devices=2,
    )
    codes = job.wait()
    assert codes == [1, 1], job.dump()
    lines = [
        [line for line in job.output(i).splitlines() if line.startswith("error: ")]
        for i in range(2)
    ]
    assert len(lines[0]) == 1 and lines[0] == lines[1], job.dump()
    match = _DIVERGED.match(lines[0][0])
    assert match, job.dump()
    steps = _all_finite_checkpoints(tmp_path / "checkpoints")
    assert steps and max(steps) == int(match.group(3)) < int(match.group(1)), job.dump()


_INFO_LINE = re.compile(r"^I\d{4} \d\d:\d\d:\d\d", re.MULTILINE)


def test_library_info_logs_only_with_verbose(tmp_path):
    def train(workdir, *extra):
        # A process of its own: which libraries log, and where, is set up once per process (absl,
        # Orbax), so a fresh program is what shows what a user sees.
        out = run_tool("jaxblend.train", [*TINY, "--log_interval=2", "--save_interval=2",
             "--train_iters=4", f"--workdir={workdir}", *extra], own_process=True)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return out

    quiet = train(tmp_path / "quiet")
    assert not _INFO_LINE.search(quiet.stdout + quiet.stderr), quiet.stderr[-3000:]
    assert quiet.stderr.strip() == "", quiet.stderr[-3000:]
    assert sorted(losses(quiet.stdout)) == [1, 2, 4]
    assert quiet.stdout.strip().splitlines()[-1].startswith("finished at step 4: final loss ")
    assert (tmp_path / "quiet" / "checkpoints" / "4").is_dir()
    verbose = train(tmp_path / "verbose", "--verbose")
    assert re.search(r"^I\d{4} .*checkpoint_manager\.py", verbose.stderr, re.MULTILINE)
    assert sorted(losses(verbose.stdout)) == [1, 2, 4]


_WITHOUT_OPTAX = """
import runpy, sys
sys.modules["optax"] = None  # as if the 'train' extra were not installed
sys.argv = ["jaxblend.train", "--mock_data", "--seq_length=16", "--train_iters=1",
            "--workdir=" + sys.argv[1]]
runpy.run_module("jaxblend.train", run_name="__main__", alter_sys=True)
"""


def test_missing_optax_is_one_line_naming_the_extra(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OPTAX, str(tmp_path)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        "error: the training example needs optax: pip install 'jaxblend[train]'"
    )


def test_per_dataset_tokens_match_the_batches_and_survive_resume(tmp_path):
    """Per-dataset figures of a blend: tokens consumed per dataset equal the batches' loss-mask
    counts by `dataset_ids` (dump_batches of the same steps), through a resume from a checkpoint;
    validation reports each dataset of the validation blend."""
    import json

    import numpy as np
    from helpers_data import write_random_dataset

    rng = np.random.default_rng(5)
    a, b = (write_random_dataset(str(tmp_path / n), rng, 150, lengths=(2, 40), vocab=(0, 127),
                                 eod=127) for n in ("a", "b"))
    data = [f"--data_path=30 {a} 70 {b}", "--split=90,10,0", "--seq_length=16",
            "--train_samples=64", "--valid_samples=16", "--eod_id=127", "--eod_mask_loss",
            f"--data_cache_path={tmp_path / 'cache'}", "--global_batch_size=8"]
    metrics = tmp_path / "metrics.jsonl"
    model = ["--vocab_size=128", "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1",
             "--num_attention_heads=2", "--log_interval=2", "--save_interval=3",
             "--eval_interval=3", "--eval_iters=1", f"--workdir={tmp_path / 'run'}",
             f"--metrics_jsonl={metrics}"]

    def train(iters):
        out = run_tool("jaxblend.train", [*data, *model, f"--train_iters={iters}"])
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return out.stdout

    first = train(6)
    resumed = train(8)
    assert "resumed from" in resumed and "step 6" in resumed
    dumped = run_tool("jaxblend.tools.dump_batches", [*data, "--steps=8",
         f"--out={tmp_path / 'dump'}"])
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    with np.load(tmp_path / "dump" / "batches.npz") as f:
        ids, mask = f["dataset_ids"], f["loss_mask"]  # [steps, B], [steps, B, S]
    row_tokens = mask.sum(-1).astype(np.int64)

    def expected(steps):
        return [int(row_tokens[:steps][ids[:steps] == j].sum()) for j in (0, 1)], [
            int((ids[:steps] == j).sum()) for j in (0, 1)]

    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    train_records = {r["step"]: r for r in records if r["kind"] == "train"}
    assert sorted(train_records) == [1, 2, 4, 6, 7, 8]  # the resumed run appends from step 7
    for step, record in train_records.items():
        tokens, samples = expected(step)
        assert [record["datasets"][p]["tokens"] for p in (a, b)] == tokens, step
        assert [record["datasets"][p]["samples"] for p in (a, b)] == samples, step
    assert 0 < tokens[0] < tokens[1] < 16 * 8 * 8  # the 30/70 blend, EODs masked
    # The log shows the same figures, per dataset, after each loss line.
    line = re.search(r"^step\s+8  datasets: a loss [0-9.]+ tokens ([0-9,]+) \| b loss [0-9.]+ "
                     r"tokens ([0-9,]+)$", resumed, re.MULTILINE)
    assert line and [int(t.replace(",", "")) for t in line.groups()] == tokens, resumed[-2000:]
    # Validation: the blend's loss and each of its datasets'.
    valid = [r for r in records if r["kind"] == "validation"]
    assert [r["step"] for r in valid] == [3, 6] and set(valid[0]["datasets"]) == {a, b}
    assert all(d["loss"] > 0 and d["tokens"] > 0 for d in valid[0]["datasets"].values())
    assert re.search(r"^step\s+3  validation loss [0-9.]+  datasets: a loss [0-9.]+ \| b loss "
                     r"[0-9.]+$", first, re.MULTILINE), first[-2000:]


def test_per_dataset_figures_of_a_staged_run_resumed_with_a_future_edit(tmp_path):
    """A `--data_schedule` run: a dataset that has not joined yet shows `loss -` and 0 tokens;
    resumed with a schedule whose future stage swaps a dataset for a new one, the figures continue
    by dataset name and equal the loss-mask counts of the batches the edited schedule gives."""
    import json

    import numpy as np
    from helpers_data import write_random_dataset

    rng = np.random.default_rng(11)
    a, b, c, d = (write_random_dataset(str(tmp_path / n), rng, 120, lengths=(2, 40),
                                       vocab=(0, 127), eod=127) for n in "abcd")

    def schedule(name, later):
        path = tmp_path / name
        path.write_text(json.dumps({"stages": [
            {"start_step": 0, "blend": ["50", a, "50", b]},
            {"start_step": 6, "blend": later}]}))
        return f"--data_schedule={path}"

    first_schedule = schedule("s1.json", ["50", b, "50", c])
    edited = schedule("s2.json", ["40", a, "60", d])  # the future (step 6 on) changed at step 4
    data = [f"--data_path={a}", "--split=90,10,0", "--seq_length=16", "--train_samples=64",
            "--valid_samples=0", "--eod_id=127", "--eod_mask_loss", "--global_batch_size=8",
            f"--data_cache_path={tmp_path / 'cache'}"]
    metrics = tmp_path / "metrics.jsonl"
    model = ["--vocab_size=128", "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1",
             "--num_attention_heads=2", "--log_interval=2", "--save_interval=4",
             "--eval_interval=0", f"--workdir={tmp_path / 'run'}", f"--metrics_jsonl={metrics}"]

    def run(module, *args):
        out = run_tool(module, [*args])
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return out.stdout

    first = run("jaxblend.train", *data, first_schedule, *model, "--train_iters=4")
    assert re.search(r"^step\s+4  datasets: a loss [0-9.]+ tokens [0-9,]+ \| b loss [0-9.]+ "
                     r"tokens [0-9,]+ \| c loss - tokens 0$", first, re.MULTILINE), first
    resumed = run("jaxblend.train", *data, edited, *model, "--train_iters=8")
    assert "resumed from" in resumed
    run("jaxblend.tools.dump_batches", *data, edited, "--steps=8", f"--out={tmp_path / 'dump'}")
    with np.load(tmp_path / "dump" / "batches.npz") as f:
        ids, mask = f["dataset_ids"], f["loss_mask"]
    row_tokens = mask.sum(-1).astype(np.int64)
    names = [a, b, d]  # the edited schedule's datasets, in order of first appearance
    records = {r["step"]: r for r in map(json.loads, metrics.read_text().splitlines())}
    assert sorted(records) == [1, 2, 4, 5, 6, 8]
    for step in (6, 8):
        expected = [int(row_tokens[:step][ids[:step] == j].sum()) for j in range(3)]
        assert [records[step]["datasets"][n]["tokens"] for n in names] == expected, step
    assert records[6]["datasets"][d] == {"loss": None, "loss_tokens": 0, "tokens": 0, "samples": 0}
    assert records[8]["datasets"][d]["tokens"] > 0 and c not in records[8]["datasets"]
    assert records[8]["datasets"][b]["loss_tokens"] == 0  # b left the mixture at step 6
    assert re.search(r"^step\s+8  datasets: a loss [0-9.]+ tokens [0-9,]+ \| b loss - tokens "
                     r"[0-9,]+ \| d loss [0-9.]+ tokens [0-9,]+$", resumed, re.MULTILINE), resumed


def test_metrics_jsonl_in_a_missing_directory_is_one_line_before_training(tmp_path):
    missing = tmp_path / "missing" / "m.jsonl"
    out = run_tool("jaxblend.train", [*TINY, "--train_iters=2",
         f"--workdir={tmp_path}", f"--metrics_jsonl={missing}"])
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
    assert out.stderr.strip().splitlines() == [
        f"error: --metrics_jsonl={missing}: directory {missing.parent} does not exist"]
    assert "step" not in out.stdout

"""No silent surprises in the training example: a run directory holding another run's checkpoint
is refused with the directory and the flag that chose it; a dataset shorter than one sequence, or
repeated more than `--warn_epochs` epochs, is a warning in training and in `inspect preflight`;
a refused resume prints no "resumed" line."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

pytestmark = pytest.mark.slow

MODEL = ["--hidden_size=16", "--ffn_hidden_size=32", "--num_layers=1", "--num_attention_heads=2",
         "--eval_interval=0", "--log_interval=1", "--eod_id=0"]
DATA = ["--split=100,0,0", "--seq_length=16", "--global_batch_size=8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("surprises")
    rng = np.random.default_rng(5)
    big = write_random_dataset(str(root / "big_text_document"), rng, 200, lengths=(20, 60),
                               vocab=(1, 300))
    # Ids below 300 everywhere: the runs train a model of --vocab_size=300 (one shape per number
    # of datasets, compiled once for the module).
    other = write_random_dataset(str(root / "other_text_document"), rng, 200, lengths=(20, 60),
                                 vocab=(1, 300))
    tiny = write_random_dataset(str(root / "tiny_text_document"), rng, 1, lengths=(11, 12),
                                vocab=(1, 300))
    small = write_random_dataset(str(root / "small_text_document"), rng, 4, lengths=(20, 21),
                                 vocab=(1, 300))
    return {"big": big, "other": other, "tiny": tiny, "small": small, "root": root}


def _train(*args):
    return run_tool("jaxblend.train", [*DATA, *MODEL, *args])


def _error(out) -> str:
    assert out.returncode != 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    lines = [s for s in out.stderr.splitlines() if s.startswith("error: ")]
    assert len(lines) == 1, out.stderr[-3000:]
    return lines[0]


def _warnings(stderr: str) -> list[str]:
    """The text of absl's warning lines (`W1127 07:00:00.000000 123 train.py:45] text`)."""
    return [s.split("] ", 1)[1] for s in stderr.splitlines() if s.startswith("W") and "] " in s]


def test_another_runs_checkpoint_names_the_directory_and_the_flag(data, tmp_path):
    work = tmp_path / "work"
    first = _train(f"--data_path={data['big']}", "--vocab_size=300", "--train_iters=2",
                   "--save_interval=2", f"--workdir={work}", "--train_samples=64")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    # Another run (other data, another model) in the same work directory.
    out = _train(f"--data_path={data['other']}", "--vocab_size=500", "--hidden_size=32",
                 "--train_iters=4", f"--workdir={work}")
    assert _error(out) == (
        f"error: {work}/checkpoints (from --workdir) holds another run's checkpoint (step 2): it "
        "was trained with --vocab_size=300 --hidden_size=16, this run has --vocab_size=500 "
        f"--hidden_size=32; give this run its own --workdir, or delete {work}/checkpoints to "
        "start over"
    )
    assert out.returncode == 2 and "resumed" not in out.stdout
    out = _train(f"--data_path={data['big']}", "--vocab_size=301", "--train_iters=4",
                 f"--checkpoint_dir={work}/checkpoints", f"--workdir={tmp_path / 'elsewhere'}")
    assert _error(out) == (
        f"error: {work}/checkpoints (from --checkpoint_dir) holds another run's checkpoint (step "
        "2): it was trained with --vocab_size=300, this run has --vocab_size=301; give this run "
        f"its own --checkpoint_dir, or delete {work}/checkpoints to start over"
    )
    # The same model resumes as before.
    again = _train(f"--data_path={data['big']}", "--vocab_size=300", "--train_iters=4",
                   f"--workdir={work}", "--train_samples=64")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert f"resumed from {work}/checkpoints step 2" in again.stdout.splitlines()


def test_a_refused_resume_prints_no_resumed_line(data, tmp_path):
    work = tmp_path / "work"
    first = _train(f"--data_path={data['big']}", "--vocab_size=300", "--train_iters=2",
                   "--save_interval=2", f"--workdir={work}", "--train_samples=64")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    # Other data flags (the seed) with the same model: the loader refuses the checkpoint's state.
    out = _train(f"--data_path={data['big']}", "--vocab_size=300", "--train_iters=4",
                 f"--workdir={work}", "--train_samples=64", "--seed=7")
    assert "loader state comes from a different data configuration" in _error(out)
    assert re.fullmatch(
        re.escape(f"error: {work}/checkpoints (from --workdir) holds a checkpoint (step 2) whose "
                  "loader state comes from a different data configuration (fingerprint ")
        + r"\w+, this run's \w+"
        + re.escape("): it was trained with --seed=1234, this run has --seed=7; resume with its "
                    "data flags, give this run its own --workdir, or delete "
                    f"{work}/checkpoints to start over"),
        _error(out),
    ), _error(out)
    assert out.returncode == 2 and "resumed" not in out.stdout, out.stdout


def test_other_datasets_under_the_same_flags_name_the_maps_keys(tmp_path):
    rng = np.random.default_rng(9)
    prefix = write_random_dataset(str(tmp_path / "d_text_document"), rng, 200, lengths=(20, 60),
                                  vocab=(1, 300))
    common = [f"--data_path={prefix}", "--vocab_size=300", f"--checkpoint_dir={tmp_path}/ckpt",
              f"--workdir={tmp_path}/work", "--train_samples=64"]
    first = _train(*common, "--train_iters=2", "--save_interval=2")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    write_random_dataset(prefix, rng, 150, lengths=(20, 60), vocab=(1, 300))  # other contents
    out = _train(*common, "--train_iters=4")
    line = _error(out)
    assert line.startswith(
        f"error: {tmp_path}/ckpt (from --checkpoint_dir) holds a checkpoint (step 2) whose loader "
        "state comes from a different data configuration (fingerprint "
    ), line
    assert "): its datasets or maps differ (maps key " in line, line
    assert line.endswith(
        "; resume with its data flags, give this run its own --checkpoint_dir, or delete "
        f"{tmp_path}/ckpt to start over"
    ), line
    assert out.returncode == 2 and "resumed" not in out.stdout, out.stdout


def test_a_refused_schedule_edit_prints_no_resumed_line(data, tmp_path):
    work = tmp_path / "work"

    def schedule(name, second):
        path = tmp_path / name
        path.write_text(json.dumps({"stages": [
            {"start_step": 0, "blend": [data["big"]]},
            {"start_step": second, "blend": ["50", data["big"], "50", data["other"]]},
        ]}))
        return f"--data_schedule={path}"

    common = ["--vocab_size=300", f"--workdir={work}", "--valid_samples=0",
              f"--data_cache_path={work}/cache"]
    first = run_tool("jaxblend.train", ["--seq_length=16", "--global_batch_size=8", *MODEL,
                                        *common, schedule("a.json", 3), "--train_iters=4",
                                        "--save_interval=4"])
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    out = run_tool("jaxblend.train", ["--seq_length=16", "--global_batch_size=8", *MODEL,
                                      *common, schedule("b.json", 2), "--train_iters=6"])
    assert _error(out).startswith(f"error: --data_schedule {tmp_path / 'b.json'}: stage 1")
    assert "resumed" not in out.stdout, out.stdout


def test_a_dataset_shorter_than_a_sequence_is_a_warning(data, tmp_path):
    args = [f"--data_path=1 {data['big']} 1 {data['tiny']}", "--seq_length=16",
            "--global_batch_size=8", "--train_iters=2"]
    line = (
        f"tiny_text_document ({data['tiny']}) has 11 tokens in the train split, fewer than one "
        "sequence (--seq_length=16): every sample repeats it, {epochs} epochs in all; give it "
        "more data, or a shorter --seq_length"
    )
    out = run_tool("jaxblend.tools.inspect", ["preflight", *args, "--split=100,0,0"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    epochs = _epochs(out, "tiny_text_document")
    lines = out.stdout.splitlines()
    assert f"WARNING: {line.format(epochs=epochs)}" in lines
    assert lines[-1] == "preflight: ok, with 1 warning (WARNING lines above)"
    trained = run_tool("jaxblend.train", [*args, "--split=100,0,0", *MODEL[:-2],
                                          "--eod_id=0", "--vocab_size=300", "--save_interval=0",
                                          f"--workdir={tmp_path / 'w'}"])
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    assert line.format(epochs=epochs) in _warnings(trained.stderr)


def test_a_dataset_repeated_more_than_warn_epochs_is_a_warning(data, tmp_path):
    # `small` holds 80 tokens: 5 samples of 16 per epoch; a 50/50 blend of 96 samples reads it
    # 10 times over.
    args = [f"--data_path=1 {data['big']} 1 {data['small']}", "--seq_length=16",
            "--global_batch_size=8", "--train_iters=12", "--split=100,0,0"]
    out = run_tool("jaxblend.tools.inspect", ["preflight", *args])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "preflight: ok"  # 10 epochs: below the default 16
    out = run_tool("jaxblend.tools.inspect", ["preflight", *args, "--warn_epochs=4"])
    epochs = _epochs(out, "small_text_document")
    assert epochs > 4
    line = (
        f"small_text_document ({data['small']}) is repeated {epochs} epochs in training (more "
        "than --warn_epochs=4): lower its blend weight or --train_samples (--train_iters), or "
        "raise --warn_epochs if it is meant"
    )
    lines = out.stdout.splitlines()
    assert f"WARNING: {line}" in lines
    assert f"datasets repeated in training: small_text_document x{epochs}" in lines
    assert lines[-1] == "preflight: ok, with 1 warning (WARNING lines above)"
    trained = _train(*args[:1], "--train_iters=12", "--vocab_size=300", "--save_interval=0",
                     "--warn_epochs=4", f"--workdir={tmp_path / 'w'}")
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    assert line in _warnings(trained.stderr)
    quiet = _train(*args[:1], "--train_iters=12", "--vocab_size=300", "--save_interval=0",
                   f"--workdir={tmp_path / 'w2'}")
    assert quiet.returncode == 0 and not [w for w in _warnings(quiet.stderr) if "epochs" in w]


def _epochs(out, name: str) -> int:
    """The epochs column of dataset `name` in preflight's train rows."""
    for s in out.stdout.splitlines():
        parts = s.split()
        if len(parts) == 8 and parts[:2] == ["train", name]:  # ... maps "2.3 KB"
            return int(parts[4])
    raise AssertionError(out.stdout)

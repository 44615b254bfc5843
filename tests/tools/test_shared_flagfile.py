"""The tools that read data (`build_index`, `dump_samples`, `dump_batches`, `inspect`) accept the
training job's flagfile: the flags of `jaxblend.train` a tool does not use (model, optimizer,
run, ...) are ignored with one note line naming them, so one flagfile serves them all; a flag no
program defines is still an error. Run in this process as the command line runs them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from absl import flags
from helpers_cli import run_tool
from helpers_data import write_random_dataset

DEMO_FLAGS = Path(__file__).resolve().parents[2] / "configs" / "demo.flags"
NOTE = "note: ignored the flags of jaxblend.train that "
# The demo flagfile's training-only flags (none of them is a data, step-plan or schema flag).
TRAINING_ONLY = ("workdir", "lr", "hidden_size", "num_layers", "save_interval",
                 "default_corpus_weights")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    root = tmp_path_factory.mktemp("shared_flagfile")
    return write_random_dataset(str(root / "web"), np.random.default_rng(3), 120, eod=0)


def _notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("note:")]


def _named(note: str) -> list[str]:
    return re.findall(r"--(\w+)", note.split(" does not use: ", 1)[1])


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("jaxblend.tools.inspect", ["stats"]),
        ("jaxblend.tools.inspect", ["explain", "--step=0"]),
        ("jaxblend.tools.build_index", []),
        ("jaxblend.tools.dump_samples", ["--num=2"]),
        ("jaxblend.tools.dump_batches", ["--steps=1"]),
    ],
)
def test_the_demo_flagfile_serves_every_tool_with_one_note(module, args, prefix, tmp_path):
    out_flag = [f"--out={tmp_path / 'out'}"] if "dump" in module else []
    defined_before = "hidden_size" in flags.FLAGS  # another test may have defined the group
    out = run_tool(module, [
        *args, f"--flagfile={DEMO_FLAGS}", f"--data_path={prefix}",
        f"--data_cache_path={tmp_path / 'cache'}", "--eod_id=0", *out_flag,
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    notes = _notes(out.stderr)
    assert len(notes) == 1, out.stderr[-3000:]
    assert notes[0].startswith(f"{NOTE}{module} does not use: "), notes[0]
    named = _named(notes[0])
    assert set(TRAINING_ONLY) <= set(named), named
    for used in ("seq_length", "split", "train_samples", "global_batch_size", "data_path"):
        assert used not in named  # flags the tool reads are read, not ignored
    # The training flags were defined for the parse only.
    assert ("hidden_size" in flags.FLAGS) == defined_before


def test_the_shared_flagfile_gives_the_tool_the_training_jobs_index_maps(prefix, tmp_path):
    data = tmp_path / "data.flags"
    data.write_text(
        f"--data_path={prefix}\n--split=90,10,0\n--seq_length=32\n--train_samples=400\n"
        f"--data_cache_path={tmp_path / 'cache'}\n"
    )
    shared = tmp_path / "run.flags"
    shared.write_text(
        data.read_text() + "--hidden_size=64\n--lr=1e-3\n--mesh_shape=8\n--worker_count=2\n"
        "--eod_id=0\n--eod_mask_loss\n--checkpoint_dir=/nowhere\n"
    )
    alone = run_tool("jaxblend.tools.build_index", [f"--flagfile={data}"], check=True)
    both = run_tool("jaxblend.tools.build_index", [f"--flagfile={shared}"], check=True)
    assert _notes(alone.stderr) == []
    key = re.compile(r"^index maps (\S+) at ", re.MULTILINE)
    assert key.search(both.stdout).group(1) == key.search(alone.stdout).group(1)
    assert set(_named(_notes(both.stderr)[0])) == {
        "hidden_size", "lr", "mesh_shape", "worker_count", "eod_id", "eod_mask_loss",
        "checkpoint_dir",
    }


def test_every_spelling_of_a_training_flag_is_ignored(prefix, tmp_path):
    out = run_tool("jaxblend.tools.build_index", [
        f"--data_path={prefix}", "--seq_length=16", f"--data_cache_path={tmp_path / 'cache'}",
        "--hidden-size", "64", "--noreset_position_ids", "--no-reset-attention-mask",
        "--lr=1e-3", "--num-layers=3",
    ])
    assert out.returncode == 0, out.stderr[-3000:]
    (note,) = _notes(out.stderr)
    assert _named(note) == [
        "hidden_size", "reset_position_ids", "reset_attention_mask", "lr", "num_layers",
    ]


def test_a_flag_of_no_program_is_still_an_error(prefix, tmp_path):
    out = run_tool("jaxblend.tools.inspect", [
        "stats", f"--flagfile={DEMO_FLAGS}", f"--data_path={prefix}", "--hiden_size=3",
    ])
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "hiden_size" in out.stderr


def test_the_training_example_itself_accepts_no_unknown_flag():
    out = run_tool("jaxblend.train", ["--out=/tmp/x"])
    assert out.returncode == 2
    assert "out" in out.stderr.strip().splitlines()[-1]

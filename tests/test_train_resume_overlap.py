"""A resumed training run reads its first steps while the checkpoint's arrays are restored: the
loader starts from the checkpoint's small items (loader state, metadata), its first read is issued
before the arrays' restore returns (the step function compiles for that batch meanwhile), and the
run trains on the same bytes to the same losses as a resume that reads and compiles only after
the restore, and as the run that was never interrupted."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset
from helpers_multiproc import run_cli

from jaxblend import train
from jaxblend.loading.host_source import HostStepSource
from jaxblend.loading.loader import StepLoader
from jaxblend.training.checkpoint import Checkpointer

pytestmark = pytest.mark.slow

MODEL = ["--vocab_size=128", "--hidden_size=32", "--ffn_hidden_size=64", "--num_layers=1",
         "--num_attention_heads=2", "--log_interval=1", "--eval_interval=0", "--save_interval=3",
         "--keep_checkpoints=3", "--eod_id=127"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlap")
    rng = np.random.default_rng(11)
    a, b = (write_random_dataset(str(root / n), rng, 120, lengths=(2, 40), vocab=(0, 127),
                                 eod=127) for n in ("a", "b"))
    return [f"--data_path=40 {a} 60 {b}", "--split=100,0,0", "--seq_length=16",
            "--train_samples=64", "--global_batch_size=8",
            f"--data_cache_path={root / 'cache'}"]


class _Recorder:
    """Wraps the reads of the loader's steps and the restore of the checkpoint's arrays: the
    order of the first read and the restore's end, and a digest of every step's record."""

    def __init__(self, monkeypatch, wait_for_read: bool):
        self.events: list[tuple[str, int]] = []
        self.digests: dict[int, str] = {}
        self.first_read = threading.Event()
        self._lock = threading.Lock()
        read, restore = HostStepSource._read, Checkpointer.restore_state

        def recording_read(source, step):
            record = read(source, step)
            with self._lock:
                if not self.first_read.is_set():
                    self.events.append(("read", step))
                    self.first_read.set()
                digest = hashlib.sha256()
                for key in sorted(record):
                    digest.update(key.encode() + np.ascontiguousarray(record[key]).tobytes())
                self.digests[step] = digest.hexdigest()
            return record

        def recording_restore(ckpt, step, like):
            state = restore(ckpt, step, like)
            if wait_for_read:  # a read issued before the restore returned is seen here
                self.first_read.wait(60)
            with self._lock:
                self.events.append(("arrays restored", step))
            return state

        monkeypatch.setattr(HostStepSource, "_read", recording_read)
        monkeypatch.setattr(Checkpointer, "restore_state", recording_restore)


def _at_the_first_step(*args):
    """Nothing ahead: the training loop takes the first batch and compiles at its first step."""
    del args
    return lambda: None


def _train(data, workdir, metrics, iters):
    out = run_tool("jaxblend.train", [*data, *MODEL, f"--workdir={workdir}",
                                      f"--metrics_jsonl={metrics}", f"--train_iters={iters}"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


def _losses(metrics) -> dict[int, float]:
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}


def _resumable_copy(full, to):
    """`full`'s work directory holding only its step-3 checkpoint."""
    shutil.copytree(full, to)
    shutil.rmtree(to / "checkpoints" / "6")
    return to


def test_first_reads_overlap_the_restore_and_train_the_same(data, tmp_path, monkeypatch):
    _train(data, tmp_path / "full", tmp_path / "full.jsonl", 6)
    full = _losses(tmp_path / "full.jsonl")
    assert sorted(full) == [1, 2, 3, 4, 5, 6]

    with monkeypatch.context() as patch:
        overlapped = _Recorder(patch, wait_for_read=True)
        out = _train(data, _resumable_copy(tmp_path / "full", tmp_path / "a"),
                     tmp_path / "a.jsonl", 6)
    assert "resumed from" in out and "step 3" in out
    # The loader's first read (step 3, the resume step) came before the arrays were restored.
    assert overlapped.events[:2] == [("read", 3), ("arrays restored", 3)], overlapped.events

    with monkeypatch.context() as patch:
        # The order before: the first read and the compilation at the first step, after the
        # restore.
        patch.setattr(StepLoader, "start_reading", lambda loader: None)
        patch.setattr(train, "_first_step", _at_the_first_step)
        after = _Recorder(patch, wait_for_read=False)
        _train(data, _resumable_copy(tmp_path / "full", tmp_path / "b"), tmp_path / "b.jsonl", 6)
    assert after.events[:2] == [("arrays restored", 3), ("read", 3)], after.events

    # The same bytes and the same losses, as the uninterrupted run.
    assert sorted(overlapped.digests) == [3, 4, 5]
    assert overlapped.digests == after.digests
    assert _losses(tmp_path / "a.jsonl") == _losses(tmp_path / "b.jsonl")
    assert _losses(tmp_path / "a.jsonl") == {k: full[k] for k in (4, 5, 6)}


@pytest.mark.multiprocess
def test_two_processes_resume_where_the_uninterrupted_run_went(data, tmp_path):
    """On 2 processes (each reading its rows ahead while it restores its shards of the arrays),
    a resumed run trains to the uninterrupted run's losses, bit for bit."""
    def train(workdir, metrics):
        run_cli("jaxblend.train", [*data, *MODEL, f"--workdir={workdir}",
                                   f"--metrics_jsonl={metrics}", "--train_iters=6",
                                   "--mesh_shape=4"], num_processes=2, devices_per_process=2)

    train(tmp_path / "full", tmp_path / "full.jsonl")
    full = _losses(tmp_path / "full.jsonl")
    assert sorted(full) == [1, 2, 3, 4, 5, 6]
    train(_resumable_copy(tmp_path / "full", tmp_path / "resumed"), tmp_path / "resumed.jsonl")
    assert _losses(tmp_path / "resumed.jsonl") == {k: full[k] for k in (4, 5, 6)}

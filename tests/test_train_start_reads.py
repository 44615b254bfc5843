"""What the training example reads to start: over a blend published on a bucket
(fake-gcs-server), the dataset table's lines of the datasets its steps reach and no other, with or
without a `--data_schedule` (the per-dataset metrics name every dataset from the configuration);
and the checkpoint directory opened and listed once, by the phase plan and the resume point
together."""

from __future__ import annotations

import json

import numpy as np
import orbax.checkpoint as ocp
import pytest
from absl import logging as absl_logging
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend.map_store.dataset_table import TableReader
from jaxblend.training import checkpoint

pytestmark = pytest.mark.slow

N, B, STEPS = 48, 8, 2
MODEL = ["--seq_length=16", f"--global_batch_size={B}", "--hidden_size=32",
         "--ffn_hidden_size=64", "--num_layers=1", "--num_attention_heads=2", "--vocab_size=128",
         "--eod_id=127", "--eval_interval=0", "--log_interval=1", "--lr_warmup_iters=1"]


@pytest.fixture(scope="module")
def uploaded(gcs_server, tmp_path_factory):
    """N small datasets on the bucket; their prefix URLs."""
    root = tmp_path_factory.mktemp("start-reads")
    rng = np.random.default_rng(17)
    return [
        gcs_server.upload(
            write_random_dataset(str(root / f"d{k:02d}"), rng, 12, lengths=(2, 30),
                                 vocab=(0, 127), eod=127),
            f"start-reads/d{k:02d}",
        )
        for k in range(N)
    ]


class _TableSpy:
    """The dataset-table positions this process read (every `TableReader`)."""

    def __init__(self, monkeypatch) -> None:
        self.positions: set[int] = set()
        fetch = TableReader._fetch

        def counted(reader, missing):
            self.positions.update(missing)
            return fetch(reader, missing)

        monkeypatch.setattr(TableReader, "_fetch", counted)


def _train(gcs_server, tmp_path, data_flags, steps=STEPS, *extra):
    with gcs_server.pointed_at():
        out = run_tool("jaxblend.train", [
            *data_flags, *MODEL, "--split=100,0,0", f"--train_samples={steps * B}",
            f"--train_iters={steps}", f"--workdir={tmp_path / 'run'}",
            f"--metrics_jsonl={tmp_path / 'metrics.jsonl'}",
            f"--data_cache_path={gcs_server.prefix_url(f'start-reads/{tmp_path.name}/maps')}",
            f"--data_cache_mirror={tmp_path / 'mirror'}", *extra,
        ])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return out, [r for r in records if r["kind"] == "train"][-1]


def _reached(uploaded, last) -> set[int]:
    """Table positions (the blend's order) of the datasets the run's rows came from."""
    return {k for k, u in enumerate(uploaded) if last["datasets"][u]["samples"] > 0}


def test_a_run_reads_the_table_lines_of_the_datasets_its_steps_reach(
    gcs_server, uploaded, tmp_path, monkeypatch
):
    spy = _TableSpy(monkeypatch)
    blend = " ".join(f"1 {u}" for u in uploaded)
    _, last = _train(gcs_server, tmp_path, [f"--data_path={blend}"], STEPS,
                     f"--save_interval={STEPS}")
    # Every dataset keeps its metrics entry, named as configured (nothing read for the names).
    assert list(last["datasets"]) == uploaded
    assert sum(last["datasets"][u]["samples"] for u in uploaded) == STEPS * B
    assert 0 < len(_reached(uploaded, last)) < N
    assert spy.positions == _reached(uploaded, last)


def test_a_scheduled_run_reads_the_table_lines_of_the_datasets_its_steps_reach(
    gcs_server, uploaded, tmp_path, monkeypatch
):
    """With `--data_schedule` (its history asks for fingerprints only when a state is saved or
    checked: `tests/sources/test_published_datasets.py`)."""
    spy = _TableSpy(monkeypatch)
    first, later = uploaded[:3], uploaded[3:]
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps({"stages": [
        {"start_step": 0, "blend": [v for u in first for v in ("1", u)]},
        {"start_step": STEPS, "blend": [v for u in later for v in ("1", u)]},
    ]}))
    out, last = _train(gcs_server, tmp_path, [f"--data_schedule={schedule}"], STEPS + 1,
                       "--valid_samples=0", "--save_interval=0")
    assert "stage 1 of 2 begins" in out.stdout
    assert list(last["datasets"]) == uploaded  # the split holds both stages' datasets
    reached = _reached(uploaded, last)
    assert reached & {0, 1, 2} and reached - {0, 1, 2} and len(reached) < N
    assert spy.positions == reached


def test_the_checkpoint_directory_is_opened_and_listed_once(tmp_path, monkeypatch):
    """A `--phase_transition_iterations` run resuming from its checkpoint opens one
    `Checkpointer`: the phase plan and the resume point share it and its listing."""
    rng = np.random.default_rng(5)
    data = write_random_dataset(str(tmp_path / "a"), rng, 60, lengths=(2, 30), vocab=(0, 127),
                                eod=127)
    flags = [f"--data_path={data}", *MODEL, "--split=100,0,0", "--train_iters=3",
             "--phase_transition_iterations=1", "--save_interval=0",
             f"--workdir={tmp_path / 'run'}"]
    first = run_tool("jaxblend.train", flags)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    opened, listed = [], []
    init, reload = checkpoint.Checkpointer.__init__, ocp.CheckpointManager.reload

    def counted_init(ckpt, *args, **kwargs):
        opened.append(args[0])
        init(ckpt, *args, **kwargs)

    def counted_reload(manager):
        listed.append(manager)
        reload(manager)

    monkeypatch.setattr(checkpoint.Checkpointer, "__init__", counted_init)
    monkeypatch.setattr(ocp.CheckpointManager, "reload", counted_reload)
    second = run_tool("jaxblend.train", flags)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert "resumed from" in second.stdout and "phase 2 of 2 from step 1" in second.stdout
    assert len(opened) == 1 and listed == [], (opened, listed)

    # A run refused after opening it (another global batch size across phases) closes it: in
    # this process no Orbax manager or log filter of its is left behind.
    filters = list(absl_logging.get_absl_logger().filters)
    refused = run_tool("jaxblend.train", [*flags, "--global_batch_size=4"])
    assert refused.returncode != 0 and "requires a fixed global batch size" in refused.stderr
    assert len(opened) == 2 and absl_logging.get_absl_logger().filters == filters

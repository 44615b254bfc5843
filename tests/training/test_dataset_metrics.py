"""Per-dataset loss, tokens and samples: the train and eval steps' sums against a direct
computation on each dataset's rows alone, the host totals (resume by name, older checkpoints),
the log lines with many datasets, and the --metrics_jsonl file."""

from __future__ import annotations

import functools
import json

import jax
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxblend import train
from jaxblend.training import dataset_metrics, model
from jaxblend.training.dataset_metrics import DatasetSums, RunTotals
from jaxblend.training.metrics_log import MetricsLog

B, S, V = 8, 12, 64


def _batch(seed: int, dataset_ids) -> dict:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, V, (B, S + 1))
    mask = (rng.random((B, S)) < 0.7).astype(np.float32)
    mask[0] = 0.0  # a row without loss tokens
    return {
        "inputs": tokens[:, :-1].astype(np.int32), "targets": tokens[:, 1:].astype(np.int32),
        "loss_mask": mask, "positions": np.tile(np.arange(S, dtype=np.int32), (B, 1)),
        "segment_ids": np.ones((B, S), np.int32),
        "dataset_ids": np.asarray(dataset_ids, np.int32),
    }


def _rows(batch: dict, keep) -> dict:
    return {k: v[keep] for k, v in batch.items()}


@pytest.fixture(scope="module")
def setup():
    cfg = model.ModelConfig(vocab_size=V, d_model=32, num_layers=1, num_heads=2, mlp_dim=64)
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    optimizer = optax.adam(1e-2)
    params = jax.jit(model.init_params, static_argnums=0)(cfg, 0)  # one compilation, not one per op
    state = train._Model(cfg, optimizer, params, optimizer.init(params))
    return cfg, mesh, state


# The loss of some rows, compiled (once per row count) rather than run op by op.
@functools.partial(jax.jit, static_argnums=1)
def _loss_of_rows(params, cfg, batch):
    """Mean cross-entropy over the positions with `loss_mask` 1, and the tokens counted."""
    return model.masked_mean(model.token_losses(params, cfg, batch), batch["loss_mask"])


def _direct(cfg, params, batch, num_datasets):
    """Each dataset's summed token loss and loss tokens, from that dataset's rows alone."""
    loss, tokens = np.zeros(num_datasets), np.zeros(num_datasets, np.int64)
    for j in range(num_datasets):
        keep = batch["dataset_ids"] == j
        if keep.any():
            mean, count = _loss_of_rows(params, cfg, _rows(batch, keep))
            loss[j], tokens[j] = float(mean) * float(count), int(count)
    return loss, tokens


def test_eval_step_per_dataset_loss_equals_each_datasets_rows_alone(setup):
    cfg, mesh, state = setup
    _, eval_step = train._compile_steps(state, 3, mesh)
    batch = _batch(1, [0, 1, 1, 0, 2, 1, 0, 1])
    loss, sums = jax.device_get(eval_step(state.params, batch, 3))
    direct_loss, direct_tokens = _direct(cfg, state.params, batch, 3)
    np.testing.assert_array_equal(sums.tokens, direct_tokens)
    np.testing.assert_allclose(sums.loss, direct_loss, rtol=1e-5)
    np.testing.assert_array_equal(sums.samples, [3, 4, 1])
    # The blend's loss is the token-weighted mean of the datasets'.
    assert float(loss) == pytest.approx(direct_loss.sum() / direct_tokens.sum(), rel=1e-5)
    # A dataset of the split without a row in the batch: nothing, not NaN.
    _, sums4 = jax.device_get(eval_step(state.params, batch, 4))
    assert sums4.tokens[3] == 0 and sums4.loss[3] == 0.0 and sums4.samples[3] == 0


def test_train_step_accumulates_on_device_from_the_pre_update_parameters(setup):
    cfg, mesh, state = setup
    train_step, _ = train._compile_steps(state, 2, mesh)
    params = jax.tree.map(lambda x: x.copy(), state.params)
    opt_state = jax.tree.map(lambda x: x.copy(), state.opt_state)
    window = dataset_metrics.DeviceWindow(2, NamedSharding(mesh, P()))
    expected_loss, expected_tokens = np.zeros(2), np.zeros(2, np.int64)
    for seed, ids in ((2, [0, 0, 1, 1, 0, 1, 1, 1]), (3, [1, 1, 1, 1, 1, 1, 1, 0])):
        batch = _batch(seed, ids)
        direct_loss, direct_tokens = _direct(cfg, params, batch, 2)
        expected_loss += direct_loss
        expected_tokens += direct_tokens
        params, opt_state, _, sums = train_step(params, opt_state, window.sums, batch)
        assert isinstance(sums.loss, jax.Array)  # stays on the device until read
        window.added(sums, B * S)
    got = window.take()
    np.testing.assert_array_equal(got.tokens, expected_tokens)
    np.testing.assert_allclose(got.loss, expected_loss, rtol=1e-5)
    np.testing.assert_array_equal(got.samples, [4, 12])
    again = window.take()  # a new window starts at zero
    assert not again.tokens.any() and not again.samples.any()


def test_device_window_asks_for_a_read_before_int32_counters_could_overflow():
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    window = dataset_metrics.DeviceWindow(2, NamedSharding(mesh, P()))
    assert not window.must_read_before(2**31 - 1)
    window.added(window.sums, 2**30)
    assert not window.must_read_before(2**30 - 1) and window.must_read_before(2**30)
    window.take()
    assert not window.must_read_before(2**31 - 1)


def _sums(loss, tokens, samples) -> DatasetSums:
    return DatasetSums(np.asarray(loss, np.float32), np.asarray(tokens, np.int32),
                       np.asarray(samples, np.int32))


def test_totals_restore_by_name_when_the_split_gains_and_loses_datasets():
    totals = RunTotals.restored(["/d/a", "/d/b"], None)
    totals.absorb(_sums([10.0, 4.0], [5, 2], [1, 1]))
    totals.absorb(_sums([0.0, 6.0], [0, 3], [0, 1]))
    assert totals.tokens.tolist() == [5, 5] and totals.samples.tolist() == [1, 2]
    np.testing.assert_allclose(totals.window_means(), [2.0, 2.0])
    totals.end_window()
    assert np.isnan(totals.window_means()).all()
    meta = json.loads(json.dumps(totals.meta()))  # as the checkpoint stores it
    # The resumed run's split: /d/c joins, /d/a is no longer read.
    resumed = RunTotals.restored(["/d/b", "/d/c"], meta)
    assert resumed.tokens.tolist() == [5, 0] and resumed.samples.tolist() == [2, 0]
    assert resumed.note is None
    assert resumed.meta()["per_dataset"]["/d/a"] == {"tokens": 5, "samples": 1}  # kept


def test_totals_from_an_older_checkpoint_restore_samples_and_say_tokens_restart():
    resumed = RunTotals.restored(["/d/a", "/d/b"], {"samples_per_dataset": [3, 4]})
    assert resumed.samples.tolist() == [3, 4] and resumed.tokens.tolist() == [0, 0]
    assert "tokens count from the resume step" in resumed.note


def test_log_line_folds_many_datasets_into_others():
    names = [f"/data/set{j}" for j in range(10)]
    totals = RunTotals.restored(names, None)
    tokens = [5, 50, 0, 7, 90, 1, 2, 3, 4, 6]
    totals.absorb(_sums([2.0 * t for t in tokens], tokens, [1] * 10))
    line = dataset_metrics.dataset_line(20, totals, top=4)
    assert line == (
        "step    20  datasets: set1 loss 2.0000 tokens 50 | set3 loss 2.0000 tokens 7 | "
        "set4 loss 2.0000 tokens 90 | others (7) loss 2.0000 tokens 21"
    )
    assert dataset_metrics.dataset_line(20, totals, top=0).count(" loss ") == 10
    assert "set2 loss - tokens 0" in dataset_metrics.dataset_line(20, totals, top=10)


def test_short_names_keep_the_whole_prefix_where_base_names_collide():
    assert dataset_metrics.short_names(["/x/web", "/y/web", "gs://b/code"]) == [
        "/x/web", "/y/web", "code"]


def test_validation_part_and_records_hold_every_dataset():
    sums = _sums([6.0, 0.0, 3.0], [3, 0, 1], [1, 0, 1])
    assert dataset_metrics.validation_part(["/d/a", "/d/b", "/d/c"], sums, 8) == (
        "datasets: a loss 2.0000 | b loss - | c loss 3.0000")
    record = dataset_metrics.validation_record(5, "valid", 2.25, ["/d/a", "/d/b", "/d/c"], sums)
    assert record["datasets"]["/d/b"] == {"loss": None, "tokens": 0}
    json.dumps(record, allow_nan=False)  # strict JSON: no NaN


def test_metrics_log_keeps_records_up_to_the_resume_step_and_drops_a_torn_line(tmp_path):
    path = str(tmp_path / "m.jsonl")
    log = MetricsLog(path, 0)
    for step in (1, 2, 3, 4):
        log.write({"kind": "train", "step": step})
    log.close()
    with open(path, "a") as f:
        f.write('{"kind": "train", "st')  # an interrupted write
    log = MetricsLog(path, 2)  # resumed from the checkpoint of step 2
    log.write({"kind": "train", "step": 3, "again": True})
    log.close()
    with open(path) as f:
        records = [json.loads(line) for line in f]
    assert [(r["step"], r.get("again")) for r in records] == [(1, None), (2, None), (3, True)]


def test_metrics_log_refuses_a_bucket_url_and_a_foreign_file(tmp_path):
    with pytest.raises(ValueError, match=r"^--metrics_jsonl=gs://b/m.jsonl: give a local file"):
        MetricsLog("gs://b/m.jsonl", 0)
    with pytest.raises(ValueError, match="directory .* does not exist"):
        MetricsLog(str(tmp_path / "missing" / "m.jsonl"), 0)
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello\n")
    with pytest.raises(ValueError, match="line 1 is not a metrics record"):
        MetricsLog(str(foreign), 0)
    assert foreign.read_text() == "hello\n"  # left as it was


def test_totals_follow_a_dataset_moved_to_a_bucket_only_in_the_same_stream():
    totals = RunTotals.restored(["/local/web", "/local/code"], None)
    totals.absorb(_sums([1.0, 1.0], [7, 3], [2, 1]))
    meta = json.loads(json.dumps(totals.meta()))
    # The run continues on the bucket's copy of /local/code (the loader state was accepted).
    moved = RunTotals.restored(["/local/web", "gs://b/code"], meta, same_stream=True)
    assert moved.tokens.tolist() == [7, 3] and moved.samples.tolist() == [2, 1]
    assert moved.carried == {}
    # A fresh stream (Megatron's next phase): a new name is a new dataset.
    fresh = RunTotals.restored(["gs://b/code", "/local/web"], meta, same_stream=False)
    assert fresh.tokens.tolist() == [0, 7] and "/local/code" in fresh.carried
    # A schedule's future edit swapping a dataset that has not been read: same stream, and the
    # names of the datasets read so far keep their positions.
    edited = RunTotals.restored(["/local/web", "/local/code", "/d/new"],
                                {**meta, "dataset_order": ["/local/web", "/local/code", "/d/old"],
                                 "per_dataset": {**meta["per_dataset"],
                                                 "/d/old": {"tokens": 0, "samples": 0}}},
                                same_stream=True)
    assert edited.tokens.tolist() == [7, 3, 0]


def test_stage_line_gives_the_weights_in_percent_and_folds_the_light_ones():
    blend = ["20", "/d/code", "30", "/d/prose", "50", "/e/legal"]
    assert dataset_metrics.stage_line(10, 1, 3, blend, 8) == (
        "step    10  stage 1 of 3 begins: code 20.0% | prose 30.0% | legal 50.0%"
    )
    assert dataset_metrics.stage_line(12, 1, 3, blend, 2, resumed=True) == (
        "step    12  stage 1 of 3 continues: legal 50.0% | others (2) 50.0%"
    )
    assert dataset_metrics.stage_line(0, 0, 1, ["/d/only"], 8) == (
        "step     0  stage 0 of 1 begins: only 100.0%"
    )

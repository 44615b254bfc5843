"""--data_schedule in every tool: dump_batches (resume across a future edit, a past edit refused),
dump_samples, build_index, inspect, the publication-record path of a bucket map store, and the
tokenizer checks over every stage's datasets."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers_cli import run_tool
from helpers_data import write_random_dataset

from jaxblend.tokenizer_facts import TokenizerFacts

B, SEQ, STEPS = 8, 16, 9
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
# The batch split 4 ways over the test process's 8 CPU devices (the runs stay in-process).
MESH = ("--mesh_shape=4,2", "--mesh_axes=data,tensor")


def schedule_doc(a, b, c, last_start=6, last_blend=None):
    """Three stages: a+b, then a+c (b leaves, c joins), then b alone (a and c leave)."""
    return {"stages": [
        {"start_step": 0, "blend": ["50", a, "50", b]},
        {"start_step": 3, "blend": ["20", a, "80", c]},
        {"start_step": last_start, "blend": last_blend or [b]},
    ]}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sched_tools")
    rng = np.random.default_rng(11)
    prefixes = [
        write_random_dataset(str(root / name), rng, docs, lengths=(2, 40), vocab=(1, 500))
        for name, docs in (("a", 60), ("b", 70), ("c", 40))
    ]
    base = root / "base.json"
    base.write_text(json.dumps(schedule_doc(*prefixes)))
    return root, prefixes, str(base)


def write_schedule(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def run(module, *args, env=None):
    return run_tool(module, [*args], env=env)


def common(schedule, cache, *extra):
    return [
        f"--data_schedule={schedule}", f"--seq_length={SEQ}", f"--train_samples={B * STEPS}",
        f"--global_batch_size={B}", f"--data_cache_path={cache}", *extra,
    ]


def dump(out, schedule, cache, *extra, env=None):
    done = run(
        "jaxblend.tools.dump_batches", *common(schedule, cache), "--eod_id=0", *MESH,
        f"--out={out}", *extra, env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    with np.load(os.path.join(out, "batches.npz")) as f:
        return {k: f[k] for k in f.files}


def train_maps(out, schedule, cache):
    """(dataset_index, dataset_sample_index) of the staged train split (dump_samples)."""
    done = run("jaxblend.tools.dump_samples", *common(schedule, cache), "--num=2", f"--out={out}")
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(os.path.join(out, "train.npz")) as f:
        return f["dataset_index"], f["dataset_sample_index"]


def test_dump_batches_follows_the_stages(data, tmp_path):
    base = data[2]
    batches = dump(str(tmp_path / "o"), base, str(tmp_path / "cache"), f"--steps={STEPS}")
    ids = batches["dataset_ids"]
    assert ids.shape == (STEPS, B)
    assert set(np.unique(ids[:3])) == {0, 1}  # a, b
    assert set(np.unique(ids[3:6])) == {0, 2}  # a, c: b left, c joined
    assert set(np.unique(ids[6:])) == {1}  # b alone
    # stage 1 draws 20/80 greedily over its 24 samples
    assert np.count_nonzero(ids[3:6] == 2) in (19, 20)
    index, _ = train_maps(str(tmp_path / "s"), base, str(tmp_path / "cache"))
    np.testing.assert_array_equal(index[batches["sample_ids"].ravel()], ids.ravel())


def test_future_edit_at_resume_keeps_the_past_and_repeats_nothing(data, tmp_path):
    a, b, c = data[1]
    base = data[2]
    cache = str(tmp_path / "cache")
    r = 4  # mid stage 1
    state = tmp_path / "state.json"
    first = dump(str(tmp_path / "first"), base, cache, f"--steps={r}", f"--state_out={state}")
    saved = json.loads(state.read_text())
    with open(base) as f:
        assert saved["step"] == r and saved["data_schedule"] == json.load(f)
    # the future changes: stage 2 starts one step earlier and blends c and b
    future = write_schedule(
        tmp_path / "future.json", schedule_doc(a, b, c, 5, ["50", c, "50", b])
    )
    past_under_future = dump(str(tmp_path / "past"), future, cache, f"--steps={r}")
    for key in first:
        assert first[key].tobytes() == past_under_future[key].tobytes(), key
    rest = dump(str(tmp_path / "rest"), future, cache, f"--steps={STEPS - r}",
                f"--state_in={state}")
    whole_future = dump(str(tmp_path / "whole"), future, cache, f"--steps={STEPS}")
    for key in rest:
        assert rest[key].tobytes() == whole_future[key][r:].tobytes(), key
    assert set(np.unique(rest["dataset_ids"][1:])) == {1, 2}  # the new stage 2
    # no (dataset, dataset sample) of steps < r is drawn again after r: every dataset continues
    base_index, base_sample = train_maps(str(tmp_path / "mb"), base, cache)
    new_index, new_sample = train_maps(str(tmp_path / "mf"), future, cache)
    cut = r * B
    np.testing.assert_array_equal(base_index[:cut], new_index[:cut])
    np.testing.assert_array_equal(base_sample[:cut], new_sample[:cut])
    before = set(zip(base_index[:cut].tolist(), base_sample[:cut].tolist()))
    after = list(zip(new_index[cut:].tolist(), new_sample[cut:].tolist()))
    assert not before & set(after)
    for d in range(3):
        drawn = sorted(s for i, s in [*before, *after] if i == d)
        assert drawn == list(range(len(drawn))), d  # each dataset continues where it left off
    # and the token windows served before r are not served again after it
    def rows(batches):
        flat_ids = batches["dataset_ids"].reshape(-1)
        flat_rows = batches["inputs"].reshape(flat_ids.size, -1)
        return {(int(i), r.tobytes()) for i, r in zip(flat_ids, flat_rows)}

    assert not rows(first) & rows(rest)


def test_past_edit_is_refused_in_one_line(data, tmp_path):
    a, b, c = data[1]
    base = data[2]
    cache = str(tmp_path / "cache")
    state = tmp_path / "state.json"
    dump(str(tmp_path / "first"), base, cache, "--steps=7", f"--state_out={state}")
    past = write_schedule(tmp_path / "past.json", schedule_doc(a, b, c, 5))
    done = run(
        "jaxblend.tools.dump_batches", *common(past, cache), *MESH,
        f"--out={tmp_path / 'o'}", "--steps=1", f"--state_in={state}",
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: --data_schedule {past}: stage 2 (start_step 5) differs from the checkpoint's "
        "schedule before the resume step 7; past steps cannot change: restore the checkpoint's "
        "stages up to step 7 (edit only stages that start at or after step 7)"
    )


def test_conflicting_flags_give_one_line(data, tmp_path):
    a, _, _ = data[1]
    base = data[2]
    done = run(
        "jaxblend.tools.dump_batches", *common(base, str(tmp_path / "cache")), *MESH,
        f"--out={tmp_path / 'o'}", "--steps=1", f"--train_data_path={a}",
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: --data_schedule gives the train split's blend and so does --train_data_path"
    )


def test_build_index_and_inspect_take_the_schedule(data, tmp_path):
    a, b, c = data[1]
    base = data[2]
    cache = str(tmp_path / "cache")
    done = run("jaxblend.tools.build_index", *common(base, cache),
               f"--data_path={a}", "--split=80,20,0", "--valid_samples=8")
    assert done.returncode == 0, done.stderr[-4000:]
    train = next(line for line in done.stdout.splitlines() if line.startswith("  train:"))
    assert f"{B * STEPS} samples" in train
    assert all(os.path.basename(p) in train for p in (a, b, c))
    valid = next(line for line in done.stdout.splitlines() if line.startswith("  valid:"))
    assert "none" not in valid and f"{os.path.basename(a)} " in valid  # from --data_path
    out = tmp_path / "explain.json"
    done = run("jaxblend.tools.inspect", "explain", *common(base, cache), "--eod_id=0", "--step=7",
               f"--json={out}")
    assert done.returncode == 0, done.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert {r["dataset"] for r in rows} == {b}  # stage 2: b alone
    assert [r["sample_id"] for r in rows] == list(range(7 * B, 8 * B))
    stats = tmp_path / "stats.json"
    done = run("jaxblend.tools.inspect", "stats", f"--data_schedule={base}", f"--json={stats}")
    assert done.returncode == 0, done.stderr[-4000:]
    assert list(json.loads(stats.read_text())) == [a, b, c]  # every stage's datasets
    done = run("jaxblend.tools.inspect", "preflight", *common(base, cache)[:2],
               f"--global_batch_size={B}", f"--train_iters={STEPS}", "--vocab_size=600")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def test_every_stage_dataset_is_checked_for_its_tokenizer(data, tmp_path):
    root = data[0]
    a, _, c = data[1]
    other = write_random_dataset(str(root / "other_text_document"), np.random.default_rng(3),
                                 30, lengths=(2, 20), vocab=(1, 200))
    for name, facts in (("other", TokenizerFacts("ByteTokenizer", 267, 256, 257)),):
        record = {"status": "complete", "outputs": {"text": other},
                  "tokenizer_facts": facts.to_json(), "max_token_id": {"text": 199}}
        (root / f"{name}.preprocess.json").write_text(json.dumps(record))
    hf = write_random_dataset(str(root / "hf_text_document"), np.random.default_rng(4), 30,
                              lengths=(2, 20), vocab=(1, 200))
    record = {"status": "complete", "outputs": {"text": hf},
              "tokenizer_facts": TokenizerFacts("HuggingFaceTokenizer sha256:0123456789ab", 1000,
                                                0, None).to_json(), "max_token_id": {"text": 199}}
    (root / "hf.preprocess.json").write_text(json.dumps(record))
    mixed = write_schedule(tmp_path / "mixed.json", schedule_doc(a, hf, c, 6, [other]))
    done = run("jaxblend.tools.dump_samples", *common(mixed, str(tmp_path / "cache")), "--num=1",
               f"--out={tmp_path / 'o'}")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "were tokenized by different tokenizers" in last and other in last and hf in last


def _environment(server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (*ENDPOINT_ENVS, "JAXBLEND_IDENTITY_CACHE")}
    env.update({k: v for k, v in server.environ().items() if k not in ENDPOINT_ENVS})
    return env


def test_publication_record_path_matches_whole_maps(data, tmp_path, s3_server):
    prefixes = data[1]
    urls = [s3_server.upload(p, f"sched/{os.path.basename(p)}") for p in prefixes]
    doc = schedule_doc(*urls)
    s3_server.write("sched/base.json", json.dumps(doc).encode())
    schedule_url = s3_server.prefix_url("sched/base.json")
    env = _environment(s3_server)
    flags = [f"--s3_endpoint={s3_server.url}", f"--steps={STEPS - 2}"]
    bucket_cache = s3_server.prefix_url("sched/maps")
    state = tmp_path / "state.json"
    record = dump(str(tmp_path / "rec"), schedule_url, bucket_cache, *flags,
                  f"--data_cache_mirror={tmp_path / 'mirror'}", f"--state_out={state}", env=env)
    # a second host's view: the record exists, a fresh mirror reads it from the bucket
    again = dump(str(tmp_path / "rec2"), schedule_url, bucket_cache, *flags,
                 f"--data_cache_mirror={tmp_path / 'mirror2'}", env=env)
    whole = dump(str(tmp_path / "whole"), schedule_url, str(tmp_path / "local"), *flags, env=env)
    for key in whole:
        assert record[key].tobytes() == whole[key].tobytes(), key
        assert again[key].tobytes() == whole[key].tobytes(), key
    # the record path's state resumes on whole maps (the same history identity)
    rest = dump(str(tmp_path / "rest"), schedule_url, str(tmp_path / "local"),
                f"--s3_endpoint={s3_server.url}", "--steps=2", f"--state_in={state}", env=env)
    full = dump(str(tmp_path / "full"), schedule_url, str(tmp_path / "local"),
                f"--s3_endpoint={s3_server.url}", f"--steps={STEPS}", env=env)
    for key in rest:
        assert rest[key].tobytes() == full[key][STEPS - 2:].tobytes(), key


@pytest.mark.parametrize(
    "batch_flags",
    # sizes 2, 2, 2, 2, 4, 4, 6, ... and 4 x 6 steps then 8 (thresholds in tokens of 16)
    [["--rampup_batch_size=2 2 24"], ["--step_batch_size_schedule=0:4 384:8"]],
    ids=["rampup", "step_batch_size_schedule"],
)
def test_stage_boundaries_stay_at_their_steps_with_variable_batches(data, tmp_path, batch_flags):
    base = data[2]
    args = [f"--data_schedule={base}", f"--seq_length={SEQ}", f"--train_samples={B * STEPS}",
            f"--data_cache_path={tmp_path / 'cache'}", "--eod_id=0", "--mesh_shape=2,4",
            "--mesh_axes=data,tensor", "--steps=8", f"--out={tmp_path / 'o'}", *batch_flags]
    if "--rampup" in batch_flags[0]:
        args.append(f"--global_batch_size={B}")
    done = run("jaxblend.tools.dump_batches", *args)
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(tmp_path / "o" / "batches.npz") as f:
        steps = {int(k.split("/")[1]): f[k] for k in f.files if k.startswith("dataset_ids/")}
        first = {int(k.split("/")[1]): f[k] for k in f.files if k.startswith("sample_ids/")}
    assert sorted(steps) == list(range(8))
    assert len({v.size for v in steps.values()}) > 1  # the batch size changes
    expected = {0: {0, 1}, 1: {0, 1}, 2: {0, 1}, 3: {0, 2}, 4: {0, 2}, 5: {0, 2}, 6: {1}, 7: {1}}
    for k, ids in steps.items():
        assert set(np.unique(ids)) <= expected[k], k
    assert 2 in steps[3]  # c joins exactly at step 3
    assert first[3][0] == sum(steps[k].size for k in range(3))


def test_dump_samples_writes_each_epoch_of_a_dataset_that_wraps(data, tmp_path):
    a, _, c = data[1]
    sched = write_schedule(tmp_path / "wrap.json", {"stages": [
        {"start_step": 0, "blend": [a]}, {"start_step": 1, "blend": [c]},
    ]})
    out = str(tmp_path / "s")
    done = run("jaxblend.tools.dump_samples", f"--data_schedule={sched}", f"--seq_length={SEQ}",
               "--train_samples=400", f"--global_batch_size={B}",
               f"--data_cache_path={tmp_path / 'cache'}", "--num=2", f"--out={out}")
    assert done.returncode == 0, done.stderr[-4000:]
    with np.load(os.path.join(out, "train.npz")) as f:
        arrays = {k: f[k] for k in f.files}
    epochs = sorted(int(k.split("_")[1][5:]) for k in arrays if k.startswith("ds1_epoch")
                    and k.endswith("_shuffle_index"))
    assert len(epochs) > 2 and epochs == list(range(len(epochs)))  # c (40 documents) wraps
    assert not any(k.startswith("ds1_document") for k in arrays)
    per_epoch = len(arrays["ds1_epoch0_shuffle_index"])
    drawn = int(np.count_nonzero(arrays["dataset_index"] == 1))
    assert (len(epochs) - 1) * per_epoch < drawn <= len(epochs) * per_epoch
    first = arrays["ds1_epoch0_document_index"]
    for e in epochs[1:]:  # every epoch is a reshuffle of the same documents
        doc = arrays[f"ds1_epoch{e}_document_index"]
        assert sorted(doc.tolist()) == sorted(first.tolist())
        assert doc.tolist() != first.tolist()

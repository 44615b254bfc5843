"""The training example on a pod that shares nothing but a bucket (fake-gcs-server), as real
local JAX processes: data, index cache and checkpoints on gs://, preemption and resume on another
process count, a lost peer, a peer failing while preparing the data."""

from __future__ import annotations

import re
import signal
import sys

import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_multiproc import Job

from jaxblend.peer_watch import LOST_PEER_EXIT

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

ITERS = 30
COMMON = [
    "--seq_length=32", "--global_batch_size=8", "--hidden_size=32", "--ffn_hidden_size=64",
    "--num_layers=1", "--num_attention_heads=2", "--log_interval=1", "--eval_interval=0",
    "--lr_warmup_iters=3", "--vocab_size=512", "--eod_id=511", "--split=100,0,0",
    f"--train_samples={ITERS * 8}", "--save_interval=1000", "--distributed_timeout=60",
    "--data_cache_wait=120", "--storage_timeout=30",
]
STEP = re.compile(r"step\s+(\d+)\s+loss\s+([0-9.]+).*samples (.*)$")


def trajectory(output: str) -> dict[int, tuple[str, str]]:
    """step -> (printed loss, printed per-dataset counts)."""
    out = {}
    for line in output.splitlines():
        if m := STEP.search(line):
            out[int(m.group(1))] = (m.group(2), m.group(3).strip())
    return out


@pytest.fixture(scope="module")
def bucket_data(gcs_server, tmp_path_factory):
    """A 3-dataset blend uploaded to the bucket; returns the --data_path value."""
    local = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(7)
    parts = []
    for weight, name in ((50, "code"), (30, "prose"), (20, "legal")):
        prefix = write_random_dataset(
            str(local / name), rng, 400, lengths=(5, 60), vocab=(0, 511), eod=511
        )
        parts += [str(weight), gcs_server.upload(prefix, f"data/{name}")]
    return " ".join(parts)


def _job(gcs_server, tmp_path, run: str, data: str, num_processes: int, devices: int,
         iters: int = ITERS, extra=(), args_of=None) -> Job:
    with gcs_server.pointed_at():
        command = [
            sys.executable, "-m", "jaxblend.train", *COMMON, f"--data_path={data}",
            f"--train_iters={iters}", f"--mesh_shape={num_processes * devices}",
            f"--data_cache_path=gs://jaxblend-test/{run}/index_cache",
            f"--checkpoint_dir=gs://jaxblend-test/{run}/checkpoints",
            # Every process has its own local directories: nothing local is shared.
            f"--workdir={tmp_path}/{run}/host{{process_id}}",
            f"--data_cache_mirror={tmp_path}/{run}/host{{process_id}}/mirror", *extra,
        ]
        return Job(command, num_processes, devices, args_of=args_of)


def _finish(job: Job) -> list[str]:
    codes = job.wait()
    assert codes == [0] * len(codes), f"exit codes {codes}:\n{job.dump()}"
    return [job.output(i) for i in range(len(codes))]


def test_preempted_on_two_processes_resumed_on_four_matches_uninterrupted(
    gcs_server, bucket_data, tmp_path
):
    # Never resumed: no checkpoint.
    reference = _finish(_job(gcs_server, tmp_path, "reference", bucket_data, 2, 2,
                             extra=["--save_interval=0"]))[0]
    expected = trajectory(reference)
    assert sorted(expected) == list(range(1, ITERS + 1)), reference[-3000:]

    # Preempt: SIGTERM to process 1 only once training runs; JAX's preemption sync must make
    # both processes checkpoint the same step and exit 0.
    job = _job(gcs_server, tmp_path, "preempted", bucket_data, 2, 2)
    job.wait_for_line(0, r"step\s+2\s+loss")
    job.send(1, signal.SIGTERM)
    first = _finish(job)
    stopped = [re.findall(r"preempted: checkpointing step (\d+)", out) for out in first]
    assert stopped[0] and stopped[0] == stopped[1], job.dump()
    step = int(stopped[0][0])
    assert 2 < step < ITERS, job.dump()
    assert f"preempted: saved checkpoint step {step}" in first[0]
    with gcs_server.pointed_at():
        keys = [k.decode() for k in gcs_server.kvstore().list().result()]
    shards = {k.split("/")[4] for k in keys if k.startswith(f"preempted/checkpoints/{step}/state/")}
    assert {"ocdbt.process_0", "ocdbt.process_1"} <= shards, shards  # each host its own shards
    before = trajectory(first[0])
    assert sorted(before) == list(range(1, step + 1))
    assert {s: expected[s] for s in before} == before

    # Resume from the bucket on 4 processes (1 device each: same 4-device data mesh).
    resumed = _finish(_job(gcs_server, tmp_path, "preempted", bucket_data, 4, 1))[0]
    assert f"resumed from gs://jaxblend-test/preempted/checkpoints step {step}" in resumed
    after = trajectory(resumed)
    assert sorted(after) == list(range(step + 1, ITERS + 1)), resumed[-3000:]
    assert {s: expected[s] for s in after} == after
    assert f"finished at step {ITERS}" in resumed


def test_sigkilled_peer_stops_the_survivor_with_one_clear_line(gcs_server, bucket_data, tmp_path):
    # Enough steps that the run is still training when the kill lands, however loaded the machine;
    # few enough that its index maps are small. Its own schedule, hence its own compilation: the
    # run that finds its step in the compilation cache (the preempted run above) is the one seen
    # to end in Gloo's 30 s key-value timeout under heavy load; this test is not made another.
    job = _job(gcs_server, tmp_path, "killed", bucket_data, 2, 2, iters=2000,
               extra=[f"--train_samples={2000 * 8}", "--peer_timeout=10"])
    try:
        job.wait_for_line(0, r"step\s+3\s+loss")
        job.send(1, signal.SIGKILL)
        codes = job.wait(timeout=30)  # the bound; --peer_timeout=10 detects in 10-15 s
    finally:
        job.kill()
    assert codes[0] == LOST_PEER_EXIT, job.dump()
    lines = [ln for ln in job.output(0).splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, job.dump()
    assert re.match(
        r"error: lost process 1 at step \d+ \(while training\): no heartbeat for \d+ s "
        r"\(--peer_timeout=10\); stopping process 0 at step \d+", lines[0]
    ), lines[0]
    assert "Traceback" not in job.output(0)


@pytest.mark.parametrize("broken", [0, 1])
def test_peer_failing_to_open_its_data_stops_the_job_with_its_error(
    gcs_server, bucket_data, tmp_path, broken
):
    missing = "gs://jaxblend-test/data/no_such_dataset"

    def args_of(i):
        return [f"--data_path={missing}"] if i == broken else []

    job = _job(gcs_server, tmp_path, f"broken{broken}", bucket_data, 2, 2, args_of=args_of,
               extra=["--peer_timeout=10"])
    try:
        codes = job.wait(timeout=120)
    finally:
        job.kill()
    other = 1 - broken
    assert codes[broken] == 1, job.dump()
    assert codes[other] == LOST_PEER_EXIT, job.dump()
    own = [ln for ln in job.output(broken).splitlines() if ln.startswith("error:")]
    assert len(own) == 1 and "no_such_dataset" in own[0], job.dump()
    lines = [ln for ln in job.output(other).splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, job.dump()
    assert lines[0].startswith(f"error: process {broken} failed while preparing the data: ")
    assert "no_such_dataset" in lines[0]


@pytest.mark.parametrize("killed", [1, 0])
def test_peer_killed_while_the_maps_are_built(gcs_server, bucket_data, tmp_path, killed,
                                              monkeypatch):
    # Process 0 stops in the middle of writing the index maps (test hook); process 1 waits for
    # them in the bucket. Then one of the two is SIGKILLed.
    monkeypatch.setenv("JAXBLEND_PAUSE_AT", "cache-write:0")
    # --verbosity=0: the INFO line of the waiting process is what the test waits for.
    job = _job(gcs_server, tmp_path, f"killed-building{killed}", bucket_data, 2, 2,
               extra=["--peer_timeout=10", "--verbosity=0"])
    survivor = 1 - killed
    try:
        job.wait_for_line(0, r"jaxblend paused at cache-write:0")
        job.wait_for_line(1, r"waiting for process 0 to publish index cache entry")
        job.send(killed, signal.SIGKILL)
        codes = job.wait(timeout=30)  # the bound; --peer_timeout=10 detects in 10-15 s
    finally:
        job.kill()
    assert codes[survivor] not in (None, 0), job.dump()
    out = job.output(survivor)
    if killed == 1:
        # The builder (its main thread asleep in the hook) is stopped by its peer watch.
        assert codes[survivor] == LOST_PEER_EXIT, job.dump()
        lines = [ln for ln in out.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1, job.dump()
        assert re.match(
            # The phase is the last one process 0 saw in process 1's heartbeat (usually
            # "preparing the data"; "starting" when process 0 was too busy to look sooner).
            r"error: lost process 1 at step 0 \(while [a-z ]+\): no heartbeat for \d+ s "
            r"\(--peer_timeout=10\); stopping process 0 at step 0$", lines[0]
        ), lines[0]
    else:
        # Process 0 hosts JAX's coordination service: when it dies, JAX's client aborts every
        # other process at once with its own fatal message, before the peer watch can speak
        # (a known limit, docs/pod.md). The job still stops, promptly.
        assert "Terminating process because the JAX distributed service detected fatal errors" \
            in out, job.dump()

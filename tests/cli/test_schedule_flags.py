"""--data_schedule: the file (local or bucket) -> the config's train_schedule in samples, the
flags it combines with, and the one-line refusals."""

from __future__ import annotations

import json

import pytest

from jaxblend import cli
from jaxblend.cli import assembly
from jaxblend.cli.assembly import data_access_from_flags
from tests.cli.conftest import step_settings

STAGES = [
    {"start_step": 0, "blend": ["50", "/d/a", "50", "/d/b"]},
    {"start_step": 4, "blend": ["20", "/d/a", "80", "/d/c"]},
]


@pytest.fixture
def sched(tmp_path):
    path = tmp_path / "sched.json"
    path.write_text(json.dumps({"stages": STAGES}))
    return str(path)


@pytest.fixture
def fl(fl, sched, monkeypatch):
    for name in ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    fl.data_path = None
    fl.data_schedule, fl.seq_length, fl.train_samples, fl.global_batch_size = sched, 16, 80, 8
    return fl


def test_schedule_alone_gives_a_train_split_only(fl):
    config = cli.run_config_from_flags().config
    assert config.blend is None and config.blend_per_split is None
    stages = config.train_schedule.stages
    assert [s.start_sample for s in stages] == [0, 32]
    assert tuple(stages[1].blend) == ("20", "/d/a", "80", "/d/c")
    assert cli.prefixes_from_flags() == ["/d/a", "/d/b", "/d/c"]


def test_rampup_turns_steps_into_samples(fl):
    fl.rampup_batch_size = "2 2 16"
    config = cli.run_config_from_flags().config
    plan = step_settings(8).covering(80)  # the ramp's steps 0..3 are smaller than 8
    assert config.train_schedule.stages[1].start_sample == sum(plan.batch_size(k) for k in range(4))
    assert config.train_schedule.stages[1].start_sample != 32


def test_with_data_path_valid_and_test_come_from_the_blend(fl):
    fl.data_path, fl.split, fl.valid_samples = ["/d/v"], "90,10,0", 8
    config = cli.run_config_from_flags().config
    assert tuple(config.blend) == ("/d/v",) and config.train_schedule is not None
    assert cli.prefixes_from_flags() == ["/d/a", "/d/b", "/d/c", "/d/v"]


def test_with_per_split_valid_path(fl):
    fl.valid_data_path = ["/d/v"]
    config = cli.run_config_from_flags().config
    assert tuple(b and tuple(b) for b in config.blend_per_split) == (None, ("/d/v",), None)


def test_train_blend_given_twice_is_refused(fl, tmp_path):
    fl.train_data_path = ["/d/t"]
    with pytest.raises(ValueError, match="--data_schedule gives the train split's blend and so does --train_data_path"):
        cli.run_config_from_flags()
    fl.train_data_path = None
    per_split = tmp_path / "per_split.json"
    per_split.write_text(json.dumps({"train": ["/d/t"], "valid": None, "test": None}))
    fl.per_split_data_args_path = str(per_split)
    with pytest.raises(ValueError, match="per_split_data_args_path's \"train\" entry"):
        cli.run_config_from_flags()


def test_without_train_samples_the_train_split_holds_the_runs_steps(fl):
    fl.train_samples, fl.train_iters = None, 5  # 5 steps of 8
    assert cli.run_config_from_flags().config.num_samples[0] == 40
    fl.train_iters = 4  # 32 samples: stage 1 (step 4) would start at the run's end
    with pytest.raises(ValueError, match=r"stage 1 \(start_step 4\) starts at or after the end"):
        cli.run_config_from_flags()


def test_a_stage_past_the_end_is_refused(fl):
    fl.train_samples = 32  # 4 steps: stage 1 starts at step 4
    with pytest.raises(ValueError) as err:
        cli.run_config_from_flags()
    assert str(err.value).startswith(f"--data_schedule {fl.data_schedule}: stage 1 (start_step 4) "
                                     "starts at or after the end of the run (4 steps")


def test_missing_and_malformed_files_name_the_flag_and_file(fl, tmp_path):
    fl.data_schedule = str(tmp_path / "nope.json")
    with pytest.raises(ValueError, match=r"--data_schedule .*nope.json: no such file"):
        cli.run_config_from_flags()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stages": [{"start_step": 0, "blend": ["50", "/d/a", "50"]}]}))
    fl.data_schedule = str(bad)
    with pytest.raises(ValueError, match=r"--data_schedule .*bad.json: stage 0 \(start_step 0\): .*odd length"):
        cli.run_config_from_flags()


def test_no_schedule_keeps_the_old_behaviour(fl):
    fl.data_schedule, fl.data_path = None, ["/d/a"]
    config = cli.run_config_from_flags().config
    assert config.train_schedule is None and tuple(config.blend) == ("/d/a",)
    fl.data_path = None
    with pytest.raises(ValueError, match="give --data_path"):
        cli.run_config_from_flags()


def test_reads_the_schedule_from_a_bucket(fl, object_store):
    object_store.write("sched/s.json", json.dumps({"stages": STAGES}).encode())
    url = object_store.prefix_url("sched/s.json")
    if object_store.scheme == "s3":
        fl.s3_endpoint = object_store.url
    fl.data_schedule = url
    schedule = assembly.read_schedule(cli.read_flag_values(), data_access_from_flags())
    assert schedule.to_json() == {"stages": STAGES}
    assert schedule.source == f"--data_schedule {url}"
    fl.data_schedule = object_store.prefix_url("sched/missing.json")
    with pytest.raises(ValueError, match="missing.json: no such file"):
        assembly.read_schedule(cli.read_flag_values(), data_access_from_flags())


def test_mock_data_is_refused_beside_a_schedule(fl):

    fl.mock_data = True
    with pytest.raises(ValueError, match="--mock_data replaces them"):
        cli.run_config_from_flags()

"""Each flag group turns into its config object: schema, sources, step plan, mesh, distributed,
loader and training settings."""

from __future__ import annotations

import pytest
from absl import app, flags

from jaxblend import cli
from jaxblend.access import DataAccess
from jaxblend.cli import assembly
from jaxblend.distributed import DistributedConfig
from jaxblend.loading import PrefetchOptions
from jaxblend.sampling import FixedStepPlan, RampupStepPlan
from jaxblend.sources import GPTSchemaOptions, MockSource
from tests.cli.conftest import step_settings


@pytest.fixture
def train_fl(fl):
    if "workdir" not in flags.FLAGS:
        cli.define_train_flags()
    return fl


def test_schema_options_and_the_default_eod(fl):
    fl.seq_length, fl.eod_mask_loss = 32, True
    assert assembly.schema_options(cli.read_flag_values(), 3) == GPTSchemaOptions(
        eod_id=3, eod_mask_loss=True
    )
    fl.eod_id = 7
    assert assembly.schema_options(cli.read_flag_values(), 3).eod_id == 7  # the flag wins


def test_mock_source_settings_and_source(fl):
    fl.mock_data, fl.mock_num_samples, fl.mock_vocab_size, fl.seed = True, 40, 99, 5
    fl.seq_length = 8
    run = cli.run_config_from_flags()
    assert run.mock == cli.MockSettings(40, 99, 5, 8) and run.config is None
    checked = cli.checked_run_config_from_flags()
    source = cli.open_source("train", checked)
    assert isinstance(source, MockSource) and len(source) == 40
    assert set(cli.open_validation_sources(checked)) == {"valid"}


def test_source_settings_are_validated(fl):
    fl.storage_backend = "tensorstore"
    assert cli.data_access_from_flags().backend == "tensorstore"
    with pytest.raises(ValueError, match="DataAccess.backend"):
        DataAccess(backend="disk")
    with pytest.raises(ValueError, match="--mock_num_samples"):
        cli.MockSettings(0, 10, 1, 8)


def test_step_plan_with_and_without_a_ramp(fl):
    assert step_settings(10).covering(100, 4) == FixedStepPlan.covering(100, 10, 4)
    fl.rampup_batch_size = "4 4 16"
    plan = step_settings(12).covering(100, 5)
    assert isinstance(plan, RampupStepPlan)
    # Megatron: one increment per 8 samples consumed (16 ramp samples, 2 increments).
    assert [plan.batch_size(k) for k in range(5)] == [4, 4, 8, 12, 12]
    assert step_settings(12).samples_for(5) == 40
    fl.rampup_batch_size = "4 5 16"
    with pytest.raises(app.UsageError):
        step_settings(12).covering(100, 5)


def test_mesh_from_flags(fl):
    assert dict(cli.mesh_from_flags().shape) == {"data": 8}
    fl.mesh_shape, fl.mesh_axes = "2,4", "fsdp,tensor"
    assert dict(cli.mesh_from_flags().shape) == {"fsdp": 2, "tensor": 4}


def test_distributed_config_from_flags(fl):
    assert cli.distributed_config_from_flags() == DistributedConfig()
    fl.coordinator_address, fl.num_processes, fl.process_id = "h:1", 2, 1
    fl.distributed_timeout = 60
    assert cli.distributed_config_from_flags() == DistributedConfig("h:1", 2, 1, 60)
    fl.process_id, fl.coordinator_address = 1, None
    with pytest.raises(ValueError, match="go together"):
        cli.distributed_config_from_flags()


def test_prefetch_from_flags(fl):
    fl.worker_count, fl.read_ahead = 2, 3
    assert cli.prefetch_from_flags() == PrefetchOptions(worker_count=2, read_ahead=3)
    fl.worker_count = 0
    assert cli.prefetch_from_flags().adapts(reads_remote=True)  # unset: on for buckets only
    assert not cli.prefetch_from_flags().adapts(reads_remote=False)
    fl.adaptive_read_ahead = False  # --noadaptive_read_ahead
    assert not cli.prefetch_from_flags().adapts(reads_remote=True)


def test_train_settings_from_flags(train_fl):
    train_fl.workdir, train_fl.global_batch_size, train_fl.eval_interval = "/w", 4, 0
    settings = cli.train_settings_from_flags()
    assert settings.checkpoint_dir == "/w/checkpoints"
    steps = cli.StepSettings.from_values(cli.read_flag_values())  # the one holder of these
    assert steps.global_batch_size == 4 and steps.eval_batches == 0
    assert not hasattr(settings, "global_batch_size") and not hasattr(settings, "train_iters")
    assert settings.default_corpus_weights == ("50", "30", "20")
    train_fl.checkpoint_dir = "gs://b/run"
    assert cli.train_settings_from_flags().checkpoint_dir == "gs://b/run"

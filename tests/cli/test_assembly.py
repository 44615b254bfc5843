"""`assemble`: the run's configuration from plain flag values, without absl; `DataFlagValues`'
defaults are the flags' own, so a program that lacks a flag assembles what one with its default
does; the storage and cache flags make a `DataAccess` (`data_access_from_flags`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from absl import app
from helpers_data import write_random_dataset

from jaxblend import cli
from jaxblend.access import DataAccess
from jaxblend.cli import assembly
from jaxblend.cli.flag_values import DataFlagValues
from jaxblend.sources import GPTSchemaOptions
from jaxblend.storage.idx_format import IndexFormatError

VALUES = DataFlagValues(
    data_path=("30", "/d/a", "70", "/d/b"), seq_length=32, global_batch_size=4, train_iters=10,
    eval_interval=5, eval_iters=3, add_extra_token_to_sequence=False, eod_id=2,
    reset_position_ids=True, multiple_validation_sets=True,
)


def test_assemble_without_flags():
    run = cli.assemble(VALUES, default_map_location="/maps")
    assert run.config.num_samples == (40, 12, 0)  # 10 steps of 4; 3 batches of 4; no test
    assert tuple(run.config.blend) == ("30", "/d/a", "70", "/d/b") and run.schedule is None
    assert run.schema == GPTSchemaOptions(eod_id=2, reset_position_ids=True)
    assert run.access.maps.location == "/maps" and run.mock is None and run.tokenizer is None
    assert run.config.multiple_validation_sets and not run.config.full_validation
    assert run.steps.final_global_batch_size == 4 and run.steps.eval_batches == 3


def test_given_counts_win_and_no_evaluation_means_no_validation_samples():
    run = cli.assemble(VALUES.replace(train_samples=7, test_samples=5))
    assert run.config.num_samples == (7, 12, 5)
    assert cli.assemble(VALUES.replace(eval_interval=0)).config.num_samples == (40, 0, 0)


def test_a_batch_size_schedule_sizes_the_counts():
    run = cli.assemble(VALUES.replace(step_batch_size_schedule="0:2 256:4"))  # 256 tokens: 8
    assert run.steps.final_global_batch_size == 4
    assert run.config.num_samples == (run.steps.planned(10).num_samples, 3 * 4, 0)
    assert run.config.num_samples[0] == 4 * 2 + 6 * 4


def test_each_fact_is_in_the_data_configuration():
    run = cli.assemble(VALUES)
    assert run.config.seq_length == run.seq_length == 32
    assert not run.config.add_extra_token_to_sequence
    schema = assembly.schema_options(VALUES.replace(seq_length=999))
    assert schema == run.schema  # the window is not the schema's
    assert not hasattr(schema, "seq_length") and not hasattr(schema, "add_extra_token_to_sequence")
    full = cli.assemble(VALUES.replace(full_validation=True)).config
    assert full.multiple_validation_sets and full.full_validation


def test_the_tokenizer_step_gives_the_default_eod():
    seen = []

    def tokenizer(config, access):
        seen.append((config.seq_length, access.maps.location))
        return cli.RunTokenizer({}, vocab_size=100, eod_id=9)

    run = cli.assemble(VALUES.replace(eod_id=None), tokenizer=tokenizer, default_eod_id=1)
    assert seen == [(32, None)] and run.schema.eod_id == 9 and run.tokenizer.vocab_size == 100
    assert cli.assemble(VALUES, tokenizer=tokenizer).schema.eod_id == 2  # --eod_id wins


def test_mock_data_has_no_data_configuration():
    run = cli.assemble(VALUES.replace(mock_data=True, mock_num_samples=8))
    assert run.config is None and run.mock == cli.MockSettings(8, 32000, 1234, 32, False)
    assert run.seq_length == 32
    with pytest.raises(ValueError, match="--seq_length is required"):
        cli.assemble(VALUES.replace(mock_data=True, seq_length=None))
    with pytest.raises(ValueError, match="--mock_data replaces them"):
        cli.assemble(VALUES.replace(mock_data=True, data_schedule="s.json"))
    with pytest.raises(ValueError, match=r"^--packing=best_fit packs .* --mock_data has none"):
        cli.assemble(VALUES.replace(mock_data=True, packing="best_fit"))


def test_the_values_defaults_are_the_flags_defaults(fl):
    assert cli.read_flag_values() == DataFlagValues()  # every flag at its default
    assert {f.name for f in dataclasses.fields(DataFlagValues)} - set(fl) == {
        "global_batch_size_given"
    }


def test_an_eod_needing_flag_without_an_eod_id_names_a_missing_dataset_first(tmp_path):
    missing = VALUES.replace(data_path=(str(tmp_path / "a_text_document"),), eod_id=None)
    with pytest.raises(IndexFormatError, match=r"a_text_document\.idx: index file does not exist"):
        cli.assemble(missing, tokenizer=lambda config, access: cli.RunTokenizer({}))
    prefix = write_random_dataset(str(tmp_path / "a_text_document"), np.random.default_rng(0), 4)
    with pytest.raises(app.UsageError) as err:
        cli.assemble(missing, tokenizer=lambda config, access: cli.RunTokenizer({}))
    assert str(err.value) == (
        "--eod_id is required with --reset_position_ids when the datasets have no preprocessing "
        f"record: {prefix} has none (looked for {tmp_path}/.jaxblend/a.preprocess.json or "
        f"{tmp_path}/a.preprocess.json); pass --eod_id, or --tokenizer_type (and its files)"
    )
    with pytest.raises(app.UsageError, match=r"^--eod_id is required with --reset_position_ids: "
                       "mock data has no end-of-document id$"):
        cli.assemble(VALUES.replace(mock_data=True, eod_id=None))


@pytest.fixture
def data(fl, monkeypatch):
    fl.data_path, fl.seq_length = ["1 /d/a"], 16
    for name in ("JAXBLEND_INDEX_MIRROR", "JAXBLEND_IDENTITY_CACHE", "JAXBLEND_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return fl


def test_data_access_from_storage_and_cache_flags(data):
    data.s3_endpoint, data.s3_region = "http://localhost:9000", "eu-west-1"
    data.storage_concurrency, data.storage_retries, data.storage_timeout = 7, 2, 30.0
    data.data_cache_path, data.data_cache_mirror = "gs://b/run1/maps/", "/tmp/mirror"
    data.data_cache_wait = 12.0
    data.storage_backend = "tensorstore"
    access = cli.data_access_from_flags()
    assert isinstance(access, DataAccess)
    store = access.object_store
    assert (store.s3_endpoint, store.s3_region) == ("http://localhost:9000", "eu-west-1")
    assert (store.request_concurrency, store.max_retries, store.request_timeout) == (7, 2, 30.0)
    assert access.maps.location == "gs://b/run1/maps/"
    assert (access.maps.mirror, access.maps.wait_seconds) == ("/tmp/mirror", 12.0)
    assert access.identity.shared_url == "gs://b/run1/maps/identity/"
    assert access.backend == "tensorstore"


def test_data_access_of_a_local_cache_and_the_default_location(data, monkeypatch):
    monkeypatch.setenv("JAXBLEND_INDEX_MIRROR", "/env/mirror")
    access = cli.data_access_from_flags(default_map_location="/run/index_cache")
    assert access.maps.location == "/run/index_cache"
    assert access.maps.mirror == "/env/mirror"
    assert access.identity.shared_url is None
    data.data_cache_path = "/flag/cache"
    assert cli.data_access_from_flags("/run/index_cache").maps.location == "/flag/cache"


def test_bad_cache_wait_names_the_flags(data):
    data["data_cache_wait"].value = 0.0
    with pytest.raises(ValueError, match="--data_cache_path/--data_cache_mirror/--data_cache_wait"):
        cli.data_access_from_flags()

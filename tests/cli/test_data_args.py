"""Megatron's --data_args_path / --per_split_data_args_path files through the data flags."""

from __future__ import annotations

import json

import pytest

from jaxblend import cli, data_args


@pytest.fixture
def fl(fl):
    fl.seq_length = 16
    fl.train_samples = 10
    return fl


def test_data_args_file_equals_data_path(fl, tmp_path):
    path = tmp_path / "blend.txt"
    path.write_text("0.3 /d/a\n0.7\t/d/b\n")
    fl.data_args_path = str(path)
    from_file = cli.run_config_from_flags().config
    fl.data_args_path = None
    fl.data_path = ["0.3 /d/a 0.7 /d/b"]
    assert from_file == cli.run_config_from_flags().config
    assert tuple(from_file.blend) == ("0.3", "/d/a", "0.7", "/d/b")


def test_per_split_file_in_megatron_forms(fl, tmp_path):
    path = tmp_path / "splits.json"
    path.write_text(
        json.dumps({"train": ["0.3", "/d/a", "0.7", "/d/b"], "valid": "/d/v", "test": None})
    )
    fl.per_split_data_args_path = str(path)
    config = cli.run_config_from_flags().config
    assert config.blend is None
    assert tuple(b and tuple(b) for b in config.blend_per_split) == (("0.3", "/d/a", "0.7", "/d/b"), ("/d/v",), None)
    fl.per_split_data_args_path = None


def test_errors_name_flag_and_file(fl, tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(data_args.DataArgsError, match=r"--data_args_path=.*nope.txt: cannot read"):
        data_args.read_data_args(str(missing))
    bad = tmp_path / "bad.json"
    bad.write_text('{"train": ["/d/a"], "valid": null}')
    with pytest.raises(data_args.DataArgsError, match=r"no 'test' entry"):
        data_args.read_per_split_data_args(str(bad))
    bad.write_text('{"train": ["/d/a"], "valid": 3, "test": null}')
    with pytest.raises(data_args.DataArgsError, match=r"'valid' must be a list"):
        data_args.read_per_split_data_args(str(bad))
    (tmp_path / "b.txt").write_text("/d/a")
    fl.data_args_path = str(tmp_path / "b.txt")
    fl.data_path = ["/d/x"]
    with pytest.raises(ValueError, match="--data_args_path excludes --data_path"):
        cli.run_config_from_flags()
    fl.data_path = None
    fl.data_args_path = None

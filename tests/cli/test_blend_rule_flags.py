"""The blends' one weight rule through every flag entry: `--data_path`, the per-split paths,
data-args files, `--data_schedule` stages and a Megatron phase's data flags. Each refuses the same
weights with one line naming the flag (and file, split or stage) and accepts the same weights,
which build the same `Blend` (the library entries: tests/index/test_blend_rule.py)."""

from __future__ import annotations

import json
import re

import pytest

from jaxblend import cli, index
from jaxblend.cli import phase_flags
from jaxblend.sampling import PhaseTransitions

REFUSED = [
    (("0", "1"), r"\[0\] = 0\.0 is zero"),
    (("-1", "2"), r"\[0\] = -1\.0 is negative"),
    (("nan", "1"), r"\[0\] = nan is not a finite number"),
    (("1", "inf"), r"\[1\] = inf is not a finite number"),
    (("0", "0"), r"are all zero"),
]
ENTRIES = ["data_path", "train_data_path", "data_args_path", "per_split_data_args_path",
           "data_schedule", "phase"]


@pytest.fixture
def fl(fl, monkeypatch):
    if "phase_transition_iterations" not in fl:
        phase_flags.define_phase_flags()
    for name in ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    fl.data_path, fl.seq_length, fl.train_samples, fl.global_batch_size = None, 16, 80, 8
    yield fl
    fl.phase_transition_iterations = None


def _blend(weights: tuple[str, str]) -> list[str]:
    return [weights[0], "/d/a", weights[1], "/d/b"]


def _config_through(fl, tmp_path, entry: str, blend: list[str]) -> tuple[index.Blend, str]:
    """The blend `entry` gives for `blend`, and the pattern its refusals start with."""
    if entry in ("data_path", "train_data_path"):
        fl[entry].value = [" ".join(blend)]
        config = cli.run_config_from_flags().config
        return config.split_blend("train"), f"--{entry}"
    if entry == "data_args_path":
        path = tmp_path / "blend.txt"
        path.write_text(" ".join(blend))
        fl.data_args_path = str(path)
        return cli.run_config_from_flags().config.blend, r"--data_args_path=.*blend\.txt: blend"
    if entry == "per_split_data_args_path":
        path = tmp_path / "per_split.json"
        path.write_text(json.dumps({"train": blend, "valid": None, "test": None}))
        fl.per_split_data_args_path = str(path)
        config = cli.run_config_from_flags().config
        return config.blend_per_split[0], r"--per_split_data_args_path=.*per_split\.json: train blend"
    if entry == "data_schedule":
        path = tmp_path / "sched.json"
        path.write_text(json.dumps({"stages": [{"start_step": 0, "blend": blend}]}))
        fl.data_schedule = str(path)
        config = cli.run_config_from_flags().config
        return (
            config.train_schedule.stages[0].blend,
            r"--data_schedule .*sched\.json: stage 0 \(start_step 0\): blend",
        )
    assert entry == "phase"  # one launch of a Megatron phase: its own --data_path
    fl.phase_transition_iterations = "4"
    fl.data_path = [" ".join(blend)]
    plan = PhaseTransitions((4,), 8, 10).plan(1)
    config = cli.run_config_from_flags(phase=plan).config
    assert config.num_samples[0] == plan.num_samples
    return config.blend, "--data_path"


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("weights", "says"), REFUSED)
def test_every_flag_entry_refuses_alike(fl, tmp_path, entry, weights, says):
    with pytest.raises(ValueError, match=says) as err:
        _config_through(fl, tmp_path, entry, _blend(weights))
    message = str(err.value)
    names = {"data_path": "--data_path", "train_data_path": "--train_data_path",
             "data_args_path": r"--data_args_path=.*blend\.txt: blend",
             "per_split_data_args_path": r"--per_split_data_args_path=.*: train blend",
             "data_schedule": r"--data_schedule .*: stage 0 \(start_step 0\): blend",
             "phase": "--data_path"}[entry]
    assert re.match(names, message), message
    assert "\n" not in message


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_flag_entry_accepts_weights_that_normalize(fl, tmp_path, entry):
    blend, _ = _config_through(fl, tmp_path, entry, _blend(("-30", "-70")))
    assert blend == index.Blend(("/d/a", "/d/b"), (-30.0, -70.0))
    assert blend.normalized_weights() == (0.3, 0.7)
    assert tuple(blend) == ("-30", "/d/a", "-70", "/d/b")

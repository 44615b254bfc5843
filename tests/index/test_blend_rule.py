"""The one typed blend and its one weight rule, through every library entry: `parse_blend`,
`GPTDataConfig` (`blend`, `blend_per_split`), `BlendStage`, data-schedule stages and data-args
files. (The flag entries are in tests/cli/test_blend_rule_flags.py; agreement with Megatron-Core's
builder in tests/index/test_parity_megatron.py.)"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from helpers_data import three_dataset_config, three_dataset_infos

from jaxblend import data_args, index
from jaxblend.index import blend_spec
from jaxblend.sampling.data_schedule import DataSchedule, DataStage

# (first weight, second weight) -> what the refusal says.
REFUSED = [
    (("0", "1"), r"\[0\] = 0\.0 is zero"),
    (("1", "-0"), r"\[1\] = 0\.0 is zero"),
    (("-1", "2"), r"\[0\] = -1\.0 is negative"),
    (("nan", "1"), r"\[0\] = nan is not a finite number"),
    (("1", "inf"), r"\[1\] = inf is not a finite number"),
    (("-inf", "1"), r"\[0\] = -inf is not a finite number"),
    (("0", "0"), r"are all zero"),
    (("1e308", "1e308"), r"sum to inf: they do not normalize"),
]


def _blend(w0: str, w1: str) -> list[str]:
    return [w0, "/d/a", w1, "/d/b"]


def _entries(tmp_path):
    """Each library entry of a blend: name -> (a function of a blend list, what the refusal
    names)."""

    def data_args_file(blend):
        path = tmp_path / "blend.txt"
        path.write_text(" ".join(blend))
        return data_args.read_data_args(str(path))

    def per_split_file(blend):
        path = tmp_path / "per_split.json"
        path.write_text(json.dumps({"train": blend, "valid": None, "test": None}))
        return data_args.read_per_split_data_args(str(path))[0]

    def schedule(blend):
        text = json.dumps({"stages": [{"start_step": 0, "blend": blend}]})
        return DataSchedule.from_json_text(text, "--data_schedule s.json").stages[0].blend

    return {
        "parse_blend": (lambda b: index.parse_blend(b, "weights of x"), "weights of x"),
        "blend": (lambda b: index.GPTDataConfig(blend=b, seq_length=8).blend, "blend"),
        "blend_per_split": (
            lambda b: index.GPTDataConfig(blend_per_split=(None, b, None), seq_length=8)
            .blend_per_split[1],
            r"blend_per_split\[valid\]",
        ),
        "BlendStage": (lambda b: index.BlendStage(7, b).blend, "stage at sample 7: blend"),
        "DataStage": (lambda b: DataStage(0, b).blend, "DataStage.blend: blend"),
        "data schedule file": (schedule, r"--data_schedule s.json: stage 0 \(start_step 0\): blend"),
        "data-args file": (data_args_file, r"--data_args_path=.*blend\.txt: blend"),
        "per-split data-args file": (
            per_split_file, r"--per_split_data_args_path=.*per_split\.json: train blend"
        ),
    }


ENTRIES = [
    "parse_blend", "blend", "blend_per_split", "BlendStage", "DataStage", "data schedule file",
    "data-args file", "per-split data-args file",
]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("weights", "says"), REFUSED)
def test_one_rule_refuses_alike_through_every_entry(tmp_path, entry, weights, says):
    make, names = _entries(tmp_path)[entry]
    with pytest.raises(ValueError, match=says) as err:
        make(_blend(*weights))
    message = str(err.value)
    assert "\n" not in message
    assert re.search(names, message), message


@pytest.mark.parametrize("entry", ENTRIES)
def test_one_rule_accepts_weights_that_normalize_through_every_entry(tmp_path, entry):
    make, _ = _entries(tmp_path)[entry]
    negative = make(_blend("-30", "-70"))
    positive = make(_blend("30", "70"))
    assert isinstance(negative, index.Blend) and negative.prefixes == ("/d/a", "/d/b")
    assert negative.normalized_weights() == positive.normalized_weights() == (0.3, 0.7)
    assert tuple(negative) == ("-30", "/d/a", "-70", "/d/b")  # the list as written


def test_rule_is_megatrons_normalization():
    # Accepted exactly when every w / sum(w) (float64, numpy's sum) is finite and > 0.
    rng = np.random.default_rng(3)
    cases = [[1.0], [-2.0], [5e-324, 1e300], [1e-300, 1e-300], [1.0, -1.0], [3.0, 0.0, 1.0]]
    cases += [list(rng.choice([-2.0, -0.5, 0.0, 1.0, 3.0], int(rng.integers(1, 5)))) for _ in range(200)]
    for weights in cases:
        w = np.asarray(weights, np.float64)
        with np.errstate(all="ignore"):
            shares = w / np.sum(w)
        expected = bool(np.all(np.isfinite(shares)) and np.all(shares > 0))
        try:
            blend_spec.validate_weights(weights, "w")
            accepted = True
        except ValueError:
            accepted = False
        assert accepted == expected, weights


def test_a_blend_is_parsed_once_and_kept():
    blend = index.parse_blend("30 /d/a 70 /d/b", "--data_path")
    assert index.parse_blend(blend) is blend
    config = index.GPTDataConfig(blend=blend, seq_length=8)
    assert config.blend is blend
    assert dataclasses.replace(config, seed=3).blend is blend
    assert config.split_blend("valid") is blend
    per = index.GPTDataConfig(blend_per_split=(blend, "/d/v", ""), seq_length=8)
    assert per.blend_per_split[0] is blend and per.blend_per_split[2] is None
    assert per.split_blend("valid") == index.Blend(("/d/v",)) and per.split_blend("test") is None
    with pytest.raises(ValueError, match="split name must be one of .*, got 'dev'"):
        per.split_blend("dev")
    stage = index.BlendStage(0, blend)
    assert stage.blend is blend and stage.parsed is blend
    assert DataStage(0, blend).blend is blend


def test_blend_is_its_megatron_list():
    blend = index.parse_blend(["0.5 /d/a 1e-3 /d/b"])
    assert list(blend) == ["0.5", "/d/a", "1e-3", "/d/b"] and len(blend) == 4 and blend[1] == "/d/a"
    assert blend == index.Blend(("/d/a", "/d/b"), (0.5, 0.001))
    assert tuple(index.Blend(("/d/a", "/d/b"), (30.0, 0.25))) == ("30", "/d/a", "0.25", "/d/b")
    assert tuple(index.Blend(("/d/a",))) == ("/d/a",)
    with pytest.raises(ValueError, match="do not spell"):
        index.Blend(("/d/a",), (1.0,), items=("2", "/d/a"))
    with pytest.raises(ValueError, match=r"blend weights\[0\] = 0.0 is zero"):
        index.Blend(("/d/a", "/d/b"), (0.0, 1.0))


def test_all_negative_weights_build_the_same_maps():
    infos = three_dataset_infos()
    positive = index.build_data_maps(three_dataset_config(), infos)
    negative = index.build_data_maps(
        three_dataset_config(blend=["-30", "/d/a", "-60", "/d/b", "-10", "/d/c"]), infos
    )
    for name in ("train", "valid", "test"):
        a, b = positive.split(name), negative.split(name)
        np.testing.assert_array_equal(a.dataset_ids(np.arange(len(a))), b.dataset_ids(np.arange(len(b))))
        np.testing.assert_array_equal(
            [a.locate(i)[1] for i in range(len(a))], [b.locate(i)[1] for i in range(len(b))]
        )


def test_stage_rules_are_one_function():
    for make in (lambda b: index.BlendStage(0, b), lambda b: DataStage(0, b)):
        with pytest.raises(ValueError, match="names dataset '/d/a' twice"):
            make(["1", "/d/a", "2", "/d/a"])
        with pytest.raises(ValueError, match="several datasets but no weights"):
            make(["/d/a", "/d/b"])

"""Split strings, blend lists and config validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxblend import index
from jaxblend.index import blend_spec
from jaxblend.index import split as split_lib


class TestSplit:
    def test_parse_pads_and_normalizes(self):
        assert split_lib.parse_split("969,30,1") == pytest.approx((0.969, 0.03, 0.001))
        assert split_lib.parse_split("99,1") == (0.99, 0.01, 0.0)
        assert split_lib.parse_split("1") == (1.0, 0.0, 0.0)
        assert split_lib.parse_split("1.5 / 0.5") == (0.75, 0.25, 0.0)

    def test_matrix_bookends_use_running_float_sums(self):
        matrix = split_lib.split_matrix(split_lib.parse_split("969,30,1"))
        a, b, c = split_lib.parse_split("969,30,1")
        assert matrix == [(0, a), (a, a + b), (a + b, a + b + c)]
        assert split_lib.split_matrix((1.0, 0.0, 0.0))[1:] == [None, None]

    def test_ranges_round_half_to_even(self):
        assert split_lib.split_range((0.0, 0.5), 5) == (0, 2)  # round(2.5) == 2
        assert split_lib.split_range((0.5, 1.0), 5) == (2, 5)
        assert split_lib.split_indices((0.0, 1.0), 3).dtype == np.int32

    @pytest.mark.parametrize("bad", ["", "a,b", "1,2,3,4", "0,0,0", "1.2.3,1", "-1,2", "nan"])
    def test_bad_split(self, bad):
        with pytest.raises(ValueError, match="split"):
            split_lib.parse_split(bad)


class TestBlend:
    def test_forms(self):
        assert index.parse_blend(["p1", "p2"]) == blend_spec.Blend(("p1", "p2"))
        assert index.parse_blend(["30", "p1", "70", "p2"]) == blend_spec.Blend(
            ("p1", "p2"), (30.0, 70.0)
        )
        assert index.parse_blend("30 /d/a 70 /d/b") == blend_spec.Blend(
            ("/d/a", "/d/b"), (30.0, 70.0)
        )
        assert index.parse_blend(["0.5 /d/a 0.5 /d/b"]).weights == (0.5, 0.5)
        assert index.parse_blend("/d/a").prefixes == ("/d/a",)

    @pytest.mark.parametrize(
        "bad, pattern",
        [
            (["-1", "a", "2", "b"], "negative"),
            (["nan", "a", "1", "b"], "finite"),
            (["0", "a", "0", "b"], "all zero"),
            (["1", "a", "2"], "odd length"),
            (["1", "a", "b", "c"], "mixes"),
            ([], "names no dataset"),
        ],
    )
    def test_bad_blend(self, bad, pattern):
        with pytest.raises(ValueError, match=pattern) as err:
            index.parse_blend(bad, "data_path")
        assert "data_path" in str(err.value)

    def test_normalize_is_numpy_float64(self):
        w = [30.0, 70.0, 5.0]
        arr = np.array(w)
        assert index.normalize(w) == (arr / arr.sum()).tolist()


class TestConfig:
    def test_defaults(self):
        config = index.GPTDataConfig(blend=["a"], seq_length=8)
        assert config.split == "969,30,1" and config.seed == 1234
        assert config.num_samples == (None, None, None)

    @pytest.mark.parametrize(
        "kwargs, pattern",
        [
            ({"blend": ["a"], "seq_length": 0}, "seq_length"),
            ({"blend": ["a"], "seq_length": -3}, "seq_length"),
            (
                {"blend": ["a"], "seq_length": 8, "num_samples": (-1, None, None)},
                r"num_samples\[train\]",
            ),
            ({"blend": ["a"], "seq_length": 8, "num_samples": (1, 2)}, "num_samples"),
            ({"blend": ["a"], "seq_length": 8, "num_samples": (2**60, 1, 1)}, "overflows"),
            ({"blend": ["a"], "seq_length": 2**31}, "seq_length"),
            ({"seq_length": 8}, "blend"),
            (
                {"blend": ["a"], "blend_per_split": (["a"], None, None), "seq_length": 8},
                "exclusive",
            ),
            ({"blend": ["a"], "seq_length": 8, "split": "1,2,3,4"}, "split"),
            ({"blend": ["a"], "seq_length": 8, "split": None}, "split"),
            ({"blend": ["1", "a", "-2", "b"], "seq_length": 8}, "negative"),
            ({"blend": ["a"], "seq_length": 8, "seed": -1}, "seed"),
            ({"blend": ["a"], "seq_length": 8, "mid_level_dataset_surplus": math.nan}, "surplus"),
            ({"blend_per_split": (["a"], None), "seq_length": 8}, "blend_per_split"),
            ({"blend_per_split": (None, ["1", "x", "2"], None), "seq_length": 8}, "odd length"),
        ],
    )
    def test_bad_config(self, kwargs, pattern):
        with pytest.raises(ValueError, match=pattern):
            index.GPTDataConfig(**kwargs)

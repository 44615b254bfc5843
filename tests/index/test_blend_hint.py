"""A blend written prefix, weight (`/d/a 30`) fails to open with the fix: `30 /d/a`."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index, opening
from jaxblend.storage.idx_format import IndexFormatError


@pytest.fixture
def prefixes(tmp_path):
    rng = np.random.default_rng(0)
    return [write_random_dataset(str(tmp_path / name), rng, 20) for name in ("a", "b")]


def _config(blend=None, per_split=None):
    return index.GPTDataConfig(blend=blend, blend_per_split=per_split, split="90,10,0",
                               seq_length=8, seed=1, num_samples=(16, 4, None))


def test_swapped_weight_and_prefix_says_to_put_the_weight_first(prefixes):
    a, b = prefixes
    with pytest.raises(IndexFormatError) as err:
        opening.open_config_datasets(_config(blend=[a, "30", b, "70"]))
    assert str(err.value) == (
        f"30.idx: index file does not exist; '{a} 30 {b} 70' looks like prefix, weight pairs but "
        f"a blend is weight, prefix: give '30 {a} 70 {b}'"
    )
    # The same in one string and in a per-split blend.
    with pytest.raises(IndexFormatError, match=f"give '30 {a}'$"):
        opening.open_config_datasets(_config(per_split=(f"{a} 30", None, None)))


def test_other_missing_datasets_get_no_blend_hint(prefixes, tmp_path):
    a, _ = prefixes
    gone = str(tmp_path / "gone")
    with pytest.raises(IndexFormatError) as err:
        opening.open_config_datasets(_config(blend=["30", a, "70", gone]))
    assert str(err.value) == f"{gone}.idx: index file does not exist"
    datasets, _ = opening.open_config_datasets(_config(blend=["30", a, "70", prefixes[1]]))
    assert list(datasets) == prefixes


def test_swapped_weights_hint_needs_the_swapped_shape():
    msg = "30.idx: index file does not exist"
    assert index.swapped_weights_hint(["/d/a 30"], msg) == (
        "; '/d/a 30' looks like prefix, weight pairs but a blend is weight, prefix: give '30 /d/a'"
    )
    assert index.swapped_weights_hint(["/d/a", "30", "/d/b"], msg) == ""  # odd length
    assert index.swapped_weights_hint(["/d/a 30", None], "/d/a.idx: index file does not exist") == ""
    assert index.swapped_weights_hint([None], msg) == ""

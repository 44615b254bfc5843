"""Row tables (`jaxblend.index.row_table`): the same pieces as `SplitMaps.spans`, for every sample."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_data import dataset_info, three_dataset_config, three_dataset_infos

from jaxblend import index
from jaxblend.index import row_table


@pytest.fixture(scope="module")
def infos():
    infos = three_dataset_infos()
    rng = np.random.default_rng(9)
    lengths = rng.integers(0, 30, 200)  # empty sequences too
    lengths[:3] = 0
    infos["/d/z"] = dataset_info("/d/z", lengths)
    return infos


def _token_offsets(split, infos, spans):
    """`.bin` token offset of each piece of `spans`, from the datasets' lengths."""
    out = np.empty(len(spans), np.int64)
    for j, (d, q, o) in enumerate(zip(spans.dataset, spans.sequence, spans.offset)):
        lengths = np.asarray(infos[split.dataset_names[int(d)]].sequence_lengths, np.int64)
        out[j] = lengths[: int(q)].sum() + int(o)
    return out


def _check_every_sample(split, infos, chunk):
    table = row_table.build_row_table(split, chunk=chunk)
    assert set(table) == set(row_table.FIELDS)
    for field, dtype in row_table.DTYPES.items():
        assert table[field].dtype == dtype, field
    n = len(split)
    assert table["starts"].shape == (n + 1,) and table["starts"][0] == 0
    assert np.all(np.diff(table["starts"]) >= 1)  # every sample has a piece
    ids = np.arange(n, dtype=np.int64)
    np.testing.assert_array_equal(table["dataset"][table["starts"][:-1]], split.dataset_ids(ids))
    want = split.spans(ids, keep_empty=True)
    got = row_table.spans_of_rows(
        0, table["starts"], table["dataset"], table["offset"], table["length"], ids
    )
    np.testing.assert_array_equal(got.row, want.row)
    np.testing.assert_array_equal(got.dataset, want.dataset)
    np.testing.assert_array_equal(got.length, want.length)
    np.testing.assert_array_equal(got.offset, _token_offsets(split, infos, want))
    assert got.row.dtype == np.int64 and got.length.dtype == np.int64
    return table


CONFIGS = {
    "weighted": {},
    "weighted_with_empty_sequences": {"blend": ["30", "/d/a", "50", "/d/z", "20", "/d/c"]},
    "unweighted": {"blend": ["/d/a", "/d/b"], "num_samples": (None, None, None)},
    "single": {"blend": ["/d/z"], "num_samples": (None, None, None)},
    "single_counted": {"blend": ["/d/b"], "num_samples": (700, 30, 20)},
    "per_split": {
        "blend": None, "split": None, "num_samples": (None, None, None),
        "blend_per_split": [["/d/b", "/d/z"], ["/d/a", "/d/c"], ["/d/c"]],
    },
}


@pytest.mark.parametrize("extra", [True, False])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_table_reproduces_spans_for_every_sample(infos, name, extra):
    config = three_dataset_config(add_extra_token_to_sequence=extra, **CONFIGS[name])
    maps = index.build_data_maps(config, infos)
    for split_name in ("train", "valid", "test"):
        split = maps.split(split_name)
        if split is None or len(split) == 0:
            continue
        table = _check_every_sample(split, infos, chunk=7)
        again = row_table.build_row_table(split, chunk=len(split) + 5)
        for field in row_table.FIELDS:  # deterministic, whatever the chunk
            np.testing.assert_array_equal(again[field], table[field])


def test_empty_pieces_are_kept(infos):
    config = three_dataset_config(add_extra_token_to_sequence=False, blend=["/d/z"],
                                  num_samples=(None, None, None), seq_length=5)
    split = index.build_data_maps(config, infos).split("train")
    table = row_table.build_row_table(split)
    assert np.any(table["length"] == 0)
    _check_every_sample(split, infos, chunk=64)


def test_a_slice_of_rows_answers_its_samples(infos):
    split = index.build_data_maps(three_dataset_config(), infos).split("train")
    table = row_table.build_row_table(split)
    lo, hi = 40, 97
    s = table["starts"]
    sl = slice(int(s[lo]), int(s[hi]))
    ids = np.array([96, 40, 55, 55, 70], np.int64)
    got = row_table.spans_of_rows(
        lo, s[lo : hi + 1], table["dataset"][sl], table["offset"][sl], table["length"][sl], ids
    )
    want = row_table.spans_of_rows(0, s, table["dataset"], table["offset"], table["length"], ids)
    for field in ("row", "dataset", "offset", "length"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    with pytest.raises(IndexError, match=r"sample id 97 is outside the row-table rows \[40, 97\)"):
        row_table.spans_of_rows(
            lo, s[lo : hi + 1], table["dataset"][sl], table["offset"][sl], table["length"][sl],
            np.array([97]),
        )
    broken = s[lo : hi + 1].copy()
    broken[5] = broken[4]
    with pytest.raises(ValueError, match=r"starts of rows \[40, 97\) do not increase"):
        row_table.spans_of_rows(lo, broken, table["dataset"][sl], table["offset"][sl],
                                table["length"][sl], ids)
    with pytest.raises(ValueError, match="disagree"):
        row_table.spans_of_rows(lo, s[lo : hi + 1], table["dataset"][sl][1:], table["offset"][sl],
                                table["length"][sl], ids)


def test_array_names():
    assert row_table.array_name("train", "starts") == "train.rows.starts"
    assert list(row_table.named_arrays("valid", dict.fromkeys(row_table.FIELDS))) == [
        "valid.rows.starts", "valid.rows.dataset", "valid.rows.offset", "valid.rows.length"]
    with pytest.raises(ValueError, match="field"):
        row_table.array_name("train", "sequence")
    with pytest.raises(ValueError, match="chunk"):
        row_table.build_row_table(None, chunk=0)

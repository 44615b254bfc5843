"""A staged train split (issue 22) through the map store: saved, reloaded memory-mapped with the
same samples, served as a subset, and laid out as a row table."""

from __future__ import annotations

import numpy as np
from helpers_data import three_dataset_config, three_dataset_infos

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.index import row_table
from jaxblend.map_store import load_or_build_data_maps

SCHEDULE = index.BlendSchedule(
    (
        index.BlendStage(0, ("50", "/d/a", "50", "/d/b")),
        index.BlendStage(120, ("20", "/d/a", "80", "/d/c")),
    )
)


def _config(**kwargs):
    return three_dataset_config(train_schedule=SCHEDULE, num_samples=(500, 40, 10), **kwargs)


def _spans(split, n):
    s = split.spans(np.arange(n, dtype=np.int64), keep_empty=True)
    return [s.row, s.dataset, s.sequence, s.offset, s.length]


def test_staged_split_cached_and_reloaded(tmp_path):
    infos = three_dataset_infos()
    access = DataAccess(maps=MapStoreOptions(location=str(tmp_path)))
    built = index.build_data_maps(_config(), infos)
    first = load_or_build_data_maps(_config(), infos, access)
    again = load_or_build_data_maps(_config(), infos, access)
    assert first.fingerprint == again.fingerprint == built.fingerprint
    assert again.cache_path is not None and again.cache_path.endswith(built.fingerprint)
    train = again.split("train")
    assert train.is_staged and len(train) == 500
    assert isinstance(train.dataset_index, np.memmap)
    assert max(train.dataset_epochs(j) for j in range(3)) > 1  # /d/c wraps
    for x, y in zip(_spans(train, 500), _spans(built.split("train"), 500)):
        np.testing.assert_array_equal(x, y)
    only = load_or_build_data_maps(_config(), infos, access, ("train",))  # served by the whole entry
    assert only.cache_path == again.cache_path and only.split("train").is_staged
    assert sorted(p.name for p in tmp_path.iterdir()) == [built.fingerprint]


def test_row_table_of_a_staged_split():
    infos = three_dataset_infos()
    train = index.build_data_maps(_config(), infos).split("train")
    table = row_table.build_row_table(train, chunk=64)
    spans = train.spans(np.arange(len(train), dtype=np.int64), keep_empty=True)
    assert len(table["starts"]) == len(train) + 1
    np.testing.assert_array_equal(table["dataset"], spans.dataset)
    np.testing.assert_array_equal(table["length"], spans.length)
    starts = {
        j: np.concatenate([[0], np.cumsum(infos[p].sequence_lengths, dtype=np.int64)])
        for j, p in enumerate(train.dataset_names)
    }
    expected = [starts[int(d)][q] + o for d, q, o in zip(spans.dataset, spans.sequence, spans.offset)]
    np.testing.assert_array_equal(table["offset"], expected)

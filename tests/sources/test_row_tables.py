"""Row tables read from a bucket: exactly the rows asked for, bounded, read ahead in the background.

(That a source over a row table gives the batches of one over the split maps is the span-index
conformance suite, tests/sources/test_span_index_conformance.py.)
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index, opening
from jaxblend.access import DataAccess
from jaxblend.index import row_table
from jaxblend.map_store import bucket as bucket_store
from jaxblend.map_store import entries
from jaxblend.sources.row_tables import BucketRowTables
from jaxblend.storage import IndexFormatError

EOD = 0


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("row_tables")
    rng = np.random.default_rng(4)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(1, 40), vocab=(1, 500), eod=EOD, dtype=dt)
        for n, d, dt in (("a", 90, np.uint16), ("b", 140, np.int32), ("c", 60, np.uint16))
    ]


@pytest.fixture
def published(prefixes, object_store, request, tmp_path):
    """Datasets uploaded, a train table published as a map-store entry; (entry url, table,
    access)."""
    base = f"row-tables/{request.node.name}"
    urls = [object_store.upload(p, f"{base}/data/{p.rsplit('/', 1)[1]}") for p in prefixes]
    cfg = index.GPTDataConfig(
        blend=["30", urls[0], "50", urls[1], "20", urls[2]], split="90,5,5", seq_length=16, seed=7,
        num_samples=(400, 10, 10),
    )
    access = DataAccess.from_env()
    _, infos = opening.open_config_datasets(cfg, access)
    table = row_table.build_row_table(index.build_data_maps(cfg, infos).split("train"))
    entries.save(str(tmp_path), "entry", row_table.named_arrays("train", table), {})
    maps_url = object_store.prefix_url(f"{base}/maps")
    entry_url = bucket_store.Bucket(maps_url, access.object_store).publish("entry", str(tmp_path))
    return entry_url, table, access


def _wait_until(condition):
    deadline = time.monotonic() + 60
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def test_a_read_of_rows_reads_only_those_rows(published):
    entry_url, table, access = published
    tables = BucketRowTables(entry_url, "train", access, prefetch=False)
    assert len(tables) == table["starts"].shape[0] - 1  # headers: one small read per array
    assert tables.requests == 4 and tables.bytes_read == 4 * 128
    s = table["starts"]
    for lo, hi in ((120, 152), (0, 7), (300, 301)):
        before, before_bytes = tables.requests, tables.bytes_read
        got = tables.rows(lo, hi)
        np.testing.assert_array_equal(got[0], s[lo : hi + 1])
        for field, arr in zip(row_table.FIELDS[1:], got[1:]):
            np.testing.assert_array_equal(arr, table[field][s[lo] : s[hi]])
        assert tables.requests - before == 4  # starts of the rows, then their three piece ranges
        pieces = int(s[hi] - s[lo])
        assert tables.bytes_read - before_bytes == (hi - lo + 1) * 8 + pieces * row_table.BYTES_PER_PIECE
        again = tables.requests
        tables.rows(lo, hi)  # held
        assert tables.requests == again
    assert tables.held_blocks == [(120, 152), (0, 7), (300, 301)]


def test_held_rows_are_bounded_least_recently_used_first(published):
    entry_url, _, access = published
    tables = BucketRowTables(entry_url, "train", access, chunk_samples=20, cache_chunks=2,
                             prefetch=False)
    for lo in (0, 100, 200):
        tables.rows(lo, lo + 15)
    assert tables.held_blocks == [(100, 115), (200, 215)] and tables.held_rows == 30
    tables.rows(100, 101)
    tables.rows(300, 315)
    assert tables.held_blocks == [(100, 115), (300, 315)]


def test_strided_steps_are_read_ahead_in_the_background(published):
    entry_url, table, access = published
    apart = dataclasses.replace(access, object_store=dataclasses.replace(
        access.object_store, coalesce_gap=0))  # runs 40 rows apart stay apart
    tables = BucketRowTables(entry_url, "train", apart, chunk_samples=40)
    tables.rows(0, 10)
    assert tables.held_blocks == [(0, 10)]  # no stride seen yet: nothing ahead
    tables.rows(50, 60)  # stride 50, width 10: the next 4 runs are fetched
    _wait_until(lambda: len(tables.held_blocks) == 6)
    assert sorted(tables.held_blocks)[2:] == [(100, 110), (150, 160), (200, 210), (250, 260)]
    requests = tables.requests
    for lo in (100, 150):
        got = tables.rows(lo, lo + 10)
        np.testing.assert_array_equal(got[0], table["starts"][lo : lo + 11])
    assert tables.requests == requests  # held: fewer than half of the runs ahead are missing
    near = BucketRowTables(entry_url, "train", access, chunk_samples=40)  # default coalesce_gap
    near.rows(0, 10)
    near.rows(50, 60)
    _wait_until(lambda: (100, 260) in near.held_blocks)  # one range: gaps cheaper than requests


def test_adjacent_steps_are_read_ahead_as_one_range(published):
    entry_url, table, access = published
    tables = BucketRowTables(entry_url, "train", access, chunk_samples=40)
    tables.rows(0, 10)
    tables.rows(10, 20)  # one reader of every row: the next 40 rows in one range
    _wait_until(lambda: (20, 60) in tables.held_blocks)
    requests = tables.requests
    got = tables.rows(25, 55)
    np.testing.assert_array_equal(got[0], table["starts"][25:56])
    assert tables.requests == requests




def test_missing_and_out_of_range_rows_are_refused(published):
    entry_url, _table, access = published
    missing = BucketRowTables(entry_url, "valid", access)
    with pytest.raises(IndexFormatError, match=r"valid\.rows\.starts\.npy: the row table does not exist"):
        missing.rows(0, 1)
    with pytest.raises(IndexError, match=r"rows \[0, 100000\) are outside the"):
        BucketRowTables(entry_url, "train", access).rows(0, 100000)

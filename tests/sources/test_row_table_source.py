"""`RowTableSource` == `PlannedSource` byte for byte (local and from buckets); bounded row reads."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import pickle
import time

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index, opening
from jaxblend.access import DataAccess
from jaxblend.index import row_table
from jaxblend.map_store import bucket as bucket_store
from jaxblend.map_store import entries
from jaxblend.sources import GPTSchemaOptions, PlannedSource
from jaxblend.sources.row_table_source import RowTableSource
from jaxblend.sources.row_tables import ArrayRowTables, BucketRowTables
from jaxblend.storage import IndexFormatError, bin_ranges
from jaxblend.storage.bin_ranges import BinDataset
from jaxblend.storage.dataset_identity import memo as identity_memo

EOD = 0


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("row_table_source")
    rng = np.random.default_rng(4)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(1, 40), vocab=(1, 500), eod=EOD, dtype=dt)
        for n, d, dt in (("a", 90, np.uint16), ("b", 140, np.int32), ("c", 60, np.uint16))
    ]


def config(blend, extra=True, samples=(150, 20, 20)):
    return index.GPTDataConfig(
        blend=blend, split="90,5,5", seq_length=16, seed=7, num_samples=samples,
        add_extra_token_to_sequence=extra,
    )


def describe(datasets, names):
    """`BinDataset`s of opened `IndexedDataset`s (what publishing records)."""
    out = [bin_ranges.describe(datasets[name]) for name in names]
    assert all(d.generation for d in out) and [d.prefix for d in out] == list(names)
    return out


def both(cfg, options, split="train", access=None):
    """(PlannedSource, RowTableSource over an in-memory table, the table) for one split."""
    access = access or DataAccess()
    datasets, infos = opening.open_config_datasets(cfg, access)
    maps = index.build_data_maps(cfg, infos)
    plan = maps.split(split)
    members = [datasets[n] for n in plan.dataset_names]
    planned = PlannedSource(members, plan, options, fingerprint=maps.fingerprint, split=split)
    table = row_table.build_row_table(plan)
    rows = RowTableSource(
        ArrayRowTables(table), describe(datasets, plan.dataset_names), options,
        fingerprint=maps.fingerprint, split=split, length=len(plan), access=access,
    )
    rows.fingerprint_of_plan = maps.fingerprint  # for tests that build another RowTableSource
    return planned, rows, table


def assert_same(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert a[key].shape == b[key].shape, key
        assert a[key].tobytes() == b[key].tobytes(), key


OPTIONS = {
    "plain": {},
    "everything": {"eod_id": EOD, "eod_mask_loss": True, "reset_position_ids": True,
                   "reset_attention_mask": True, "inter_document_masking": True},
    "megatron": {"megatron_compat": True, "eod_id": EOD, "eod_mask_loss": True,
                 "reset_position_ids": True, "inter_document_masking": True},
}


@pytest.mark.parametrize("extra", [True, False])
@pytest.mark.parametrize("opts", sorted(OPTIONS))
@pytest.mark.parametrize("blend", ["weighted", "single"])
def test_batches_equal_planned_source(prefixes, blend, opts, extra):
    weights = ["30", prefixes[0], "50", prefixes[1], "20", prefixes[2]] if blend == "weighted" else [prefixes[1]]
    cfg = config(weights, extra=extra)
    options = GPTSchemaOptions(seq_length=16, add_extra_token_to_sequence=extra, **OPTIONS[opts])
    for split in ("train", "valid"):
        planned, rows, _ = both(cfg, options, split)
        assert len(rows) == len(planned)
        assert rows.fingerprint == planned.fingerprint
        assert rows.dataset_names == planned.dataset_names
        assert not rows.reads_remote
        n = len(planned)
        rng = np.random.default_rng(2)
        steps = [np.arange(lo, min(n, lo + 8)) for lo in range(0, n, 8)]
        scattered = [rng.integers(0, n, 12), np.array([n - 1, 0, 5000 % n, 0])]
        for ids in steps + scattered:
            assert_same(planned.read_batch(ids), rows.read_batch(ids))
            assert_same(planned.get_batch(ids), rows.get_batch(ids))
        text_p, valid_p = planned.windows(steps[0])
        text_r, valid_r = rows.windows(steps[0])
        assert text_p.tobytes() == text_r.tobytes() and valid_p.tobytes() == valid_r.tobytes()
        assert_same(planned[3], rows[3])
        empty = np.zeros(0, np.int64)
        assert_same(planned.get_batch(empty), rows.get_batch(empty))


def test_far_apart_ids_and_group_order(prefixes):
    cfg = config(["50", prefixes[0], "50", prefixes[1]], samples=(20000, 10, 10))
    options = GPTSchemaOptions(seq_length=16, eod_id=EOD, inter_document_masking=True)
    planned, rows, _ = both(cfg, options)
    ids = np.array([19990, 3, 12000, 4, 19991, 3], np.int64)  # three row ranges, repeats
    assert_same(planned.read_batch(ids), rows.read_batch(ids))


def test_only_touched_bins_are_opened(prefixes):
    cfg = config(["30", prefixes[0], "50", prefixes[1], "20", prefixes[2]])
    _planned, rows, table = both(cfg, GPTSchemaOptions(seq_length=16))
    ds_of_sample = table["dataset"][table["starts"][:-1]]
    ids = np.flatnonzero(ds_of_sample == 2)[:5]
    rows.get_batch(ids)
    assert rows.bin_reader.opened == [2]
    ids = np.flatnonzero(ds_of_sample == 0)[:5]
    rows.get_batch(ids)
    assert rows.bin_reader.opened == [0, 2]


def test_pickles_without_handles_and_reloads_a_local_entry(prefixes, tmp_path):
    cfg = config(["30", prefixes[0], "70", prefixes[1]])
    planned, rows, table = both(cfg, GPTSchemaOptions(seq_length=16))
    entries.save(str(tmp_path), "key", row_table.named_arrays("train", table), {})
    mapped = RowTableSource(
        ArrayRowTables.load(str(tmp_path / "key"), "train"), rows._datasets, rows.options,
        fingerprint="unused", split="train", length=len(rows),
    )
    ids = np.arange(10, 30)
    mapped.get_batch(ids)
    blob = pickle.dumps(mapped)
    assert len(blob) < 4000  # the recipe, not the arrays
    for source in (pickle.loads(blob), pickle.loads(pickle.dumps(rows))):
        assert source._reader is None
        assert_same(source.get_batch(ids), planned.get_batch(ids))


def test_a_rewritten_local_bin_is_refused(prefixes, tmp_path):
    cfg = config([prefixes[0]], samples=(40, 5, 5))
    _planned, rows, _ = both(cfg, GPTSchemaOptions(seq_length=16))
    stale = [BinDataset(d.prefix, d.dtype, d.bin_size, b"\0" * len(d.generation)) for d in rows._datasets]
    source = RowTableSource(rows.tables, stale, rows.options, fingerprint="f", split="train", length=len(rows))
    with pytest.raises(IndexFormatError, match=r"a\.bin was rewritten after the index maps were published"):
        source.get_batch(np.arange(4))
    assert identity_memo.local_version(prefixes[0] + ".bin")[0] == rows._datasets[0].generation


# ------------------------------------------------------------------------------------ buckets


@pytest.fixture
def published(prefixes, object_store, request, tmp_path):
    """Datasets uploaded, a train table published as a map-store entry; (planned, entry url,
    BinDatasets, table, access)."""
    base = f"row-tables/{request.node.name}"
    urls = [object_store.upload(p, f"{base}/data/{p.rsplit('/', 1)[1]}") for p in prefixes]
    cfg = config(["30", urls[0], "50", urls[1], "20", urls[2]], samples=(400, 10, 10))
    options = GPTSchemaOptions(seq_length=16, eod_id=EOD, reset_attention_mask=True,
                               inter_document_masking=True)
    access = DataAccess.from_env()
    planned, rows, table = both(cfg, options, access=access)
    entries.save(str(tmp_path), "entry", row_table.named_arrays("train", table), {})
    maps_url = object_store.prefix_url(f"{base}/maps")
    entry_url = bucket_store.Bucket(maps_url, access.object_store).publish("entry", str(tmp_path))
    return planned, rows, entry_url, table, access


def test_bucket_rows_equal_planned_source(published):
    planned, rows, entry_url, _table, access = published
    tables = BucketRowTables(entry_url, "train", access, chunk_samples=50)
    source = RowTableSource(tables, rows._datasets, rows.options, fingerprint="x", split="train",
                            length=len(rows), access=access)
    assert source.reads_remote
    n = len(planned)
    for lo in range(0, n, 37):  # steps crossing chunk boundaries
        ids = np.arange(lo, min(n, lo + 37))
        assert_same(planned.read_batch(ids), source.read_batch(ids))
    ids = np.array([n - 1, 0, 222, 223, 5], np.int64)
    assert_same(planned.get_batch(ids), source.get_batch(ids))
    assert len(tables) == n
    fresh = RowTableSource(BucketRowTables(entry_url, "train", access, chunk_samples=50),
                           rows._datasets, rows.options, fingerprint="x", split="train",
                           length=len(rows), access=access)
    steps = [np.arange(lo, min(n, lo + 16)) for lo in range(0, n, 16)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # reader threads, out of order
        for ids, got in zip(steps, pool.map(fresh.read_batch, steps)):
            assert_same(planned.read_batch(ids), got)
    assert tables.held_rows <= tables.cache_chunks * tables.chunk_samples + 37
    clone = pickle.loads(pickle.dumps(source))
    assert clone.tables.held_blocks == [] and clone.requests_issued == 0
    assert_same(clone.get_batch(ids), planned.get_batch(ids))
    assert clone.requests_issued > 0 and clone.bytes_read > 0


def _wait_until(condition):
    deadline = time.monotonic() + 60
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()


def test_a_read_of_rows_reads_only_those_rows(published):
    _, _, entry_url, table, access = published
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
    _, _, entry_url, _, access = published
    tables = BucketRowTables(entry_url, "train", access, chunk_samples=20, cache_chunks=2,
                             prefetch=False)
    for lo in (0, 100, 200):
        tables.rows(lo, lo + 15)
    assert tables.held_blocks == [(100, 115), (200, 215)] and tables.held_rows == 30
    tables.rows(100, 101)
    tables.rows(300, 315)
    assert tables.held_blocks == [(100, 115), (300, 315)]


def test_strided_steps_are_read_ahead_in_the_background(published):
    _, _, entry_url, table, access = published
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
    _, _, entry_url, table, access = published
    tables = BucketRowTables(entry_url, "train", access, chunk_samples=40)
    tables.rows(0, 10)
    tables.rows(10, 20)  # one reader of every row: the next 40 rows in one range
    _wait_until(lambda: (20, 60) in tables.held_blocks)
    requests = tables.requests
    got = tables.rows(25, 55)
    np.testing.assert_array_equal(got[0], table["starts"][25:56])
    assert tables.requests == requests


def test_bucket_table_and_bin_errors(published, object_store):
    _planned, rows, entry_url, _table, access = published
    stale = [BinDataset(d.prefix, d.dtype, d.bin_size, b"99") for d in rows._datasets]
    source = RowTableSource(BucketRowTables(entry_url, "train", access), stale, rows.options,
                            fingerprint="x", split="train", length=len(rows), access=access)
    with pytest.raises(IndexFormatError, match=r"\.bin was rewritten after the index maps were "
                       r"published \(generation .*, maps built for 99\): publish the maps again"):
        source.get_batch(np.arange(4))
    missing = BucketRowTables(entry_url, "valid", access)
    with pytest.raises(IndexFormatError, match=r"valid\.rows\.starts\.npy: the row table does not exist"):
        missing.rows(0, 1)
    with pytest.raises(IndexError, match=r"rows \[0, 100000\) are outside the"):
        BucketRowTables(entry_url, "train", access).rows(0, 100000)


# ------------------------------------------------------------------------------------- loader


def _loader_batches(source, **kwargs):
    import jax
    from jax.sharding import Mesh

    from jaxblend.loading import make_loader

    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    loader = make_loader(source, mesh, global_batch_size=8, **kwargs)
    return loader, [{k: np.asarray(v) for k, v in b.items()} for b in loader]


def test_loader_resumes_a_planned_run_on_the_row_table_path(published):
    from jaxblend.loading import PrefetchOptions

    planned, rows, entry_url, _, access = published
    source = RowTableSource(BucketRowTables(entry_url, "train", access, chunk_samples=30),
                            rows._datasets, rows.options, fingerprint=rows.fingerprint_of_plan,
                            split="train", length=len(rows), access=access)
    assert source.fingerprint == planned.fingerprint
    loader, full = _loader_batches(planned, num_steps=6)
    state = loader.state()
    resumed_state = {**state, "step": 2}
    _, rest = _loader_batches(source, num_steps=6, state=resumed_state,
                              prefetch=PrefetchOptions(worker_count=1))  # pickled into a worker
    assert len(rest) == 4
    for got, want in zip(rest, full[2:], strict=True):
        assert_same(got, want)


def test_dataset_fingerprints_come_from_what_each_source_was_opened_with(prefixes):
    cfg = config(["30", prefixes[0], "70", prefixes[1]])
    planned, rows, _ = both(cfg, GPTSchemaOptions(seq_length=16))
    datasets, _ = opening.open_config_datasets(cfg, DataAccess())
    expected = {name: datasets[name].fingerprint for name in planned.dataset_names}
    assert planned.dataset_fingerprints == expected
    with pytest.raises(ValueError, match="built without its datasets' fingerprints"):
        rows.dataset_fingerprints  # noqa: B018
    recorded = RowTableSource(
        rows.tables, describe(datasets, planned.dataset_names), rows.options,
        fingerprint="f", split="train", length=len(rows), dataset_fingerprints=expected,
    )
    assert recorded.dataset_fingerprints == expected

"""Every `SpanIndex` gives `GPTSource` the same batches and fingerprints, byte for byte.

One suite, run over every span-index implementation: the split maps in memory, the split maps
loaded from the local map store (a pickled source re-opening them as a Grain worker does), a row
table in memory, a row table memory-mapped from a local map-store entry, and a row table read by
range from a bucket (GCS and S3). Each is checked against the in-memory split maps and against
digests of the batches the package served before the span-index seam existed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import pickle

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index, opening
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.index import row_table
from jaxblend.map_store import bucket as bucket_store
from jaxblend.map_store import entries
from jaxblend.sources import (
    GPTSchemaOptions,
    GPTSource,
    RowTableSpanIndex,
    SplitMapsSpanIndex,
    open_gpt_sources,
)
from jaxblend.sources.gpt_source import gpt_source_fingerprint
from jaxblend.sources.row_tables import ArrayRowTables, BucketRowTables
from jaxblend.storage import BinDataset, IndexFormatError
from jaxblend.storage.dataset_identity import memo as identity_memo

EOD = 0

KINDS = ("split_maps", "split_maps_store", "row_tables", "row_tables_entry", "row_tables_gcs",
         "row_tables_s3")
BUCKET_KINDS = ("row_tables_gcs", "row_tables_s3")


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("span_index")
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


def window(cfg):
    """A source's window arguments (and whether rows are packed): the data configuration's."""
    return {"seq_length": cfg.seq_length,
            "add_extra_token_to_sequence": cfg.add_extra_token_to_sequence,
            "packing": cfg.packing}


def describe(datasets, names):
    """`BinDataset`s of opened `IndexedDataset`s (what publishing records)."""
    out = [datasets[name].bin_dataset for name in names]
    assert all(d.generation for d in out) and [d.prefix for d in out] == list(names)
    return out


class Opener:
    """Opens one split of a configuration through each kind of span index."""

    def __init__(self, request, tmp_path, stack):
        self.request = request
        self.tmp_path = tmp_path
        self.stack = stack  # the bucket server stays pointed at until the test ends
        self._published = 0

    def reference(self, cfg, options, split="train", access=None):
        """The source over the in-memory split maps, the split's opened datasets and maps."""
        access = access or DataAccess()
        datasets, infos = opening.open_config_datasets(cfg, access)
        maps = index.build_data_maps(cfg, infos)
        plan = maps.split(split)
        members = [datasets[n] for n in plan.dataset_names]
        source = GPTSource(SplitMapsSpanIndex(plan, members), options, **window(cfg),
                           fingerprint=maps.fingerprint, split=split, access=access)
        return source, datasets, maps

    def source(self, kind, cfg, options, split="train", dataset_fingerprints=None):
        """`GPTSource` of `split` read through a span index of `kind`."""
        if kind == "split_maps":
            return self.reference(cfg, options, split)[0]
        if kind == "split_maps_store":
            access = DataAccess(maps=MapStoreOptions(location=str(self.tmp_path / "maps")))
            open_gpt_sources(cfg, options, access=access)  # builds and caches the maps
            loaded = open_gpt_sources(cfg, options, access=access)[split]  # loads them
            assert isinstance(loaded.span_index, SplitMapsSpanIndex)
            return pickle.loads(pickle.dumps(loaded))  # re-opens them, as a Grain worker does
        _, datasets, maps = self.reference(cfg, options, split)
        plan = maps.split(split)
        table = row_table.build_row_table(plan)
        access = DataAccess()
        if kind == "row_tables":
            tables = ArrayRowTables(table)
        else:
            entry_dir = self.tmp_path / f"entry{self._published}"
            self._published += 1
            entries.save(str(entry_dir), "entry", row_table.named_arrays(split, table), {})
            if kind == "row_tables_entry":
                tables = ArrayRowTables.load(str(entry_dir / "entry"), split)
            else:
                server = self.request.getfixturevalue(f"{kind.rsplit('_', 1)[1]}_server")
                self.stack.enter_context(server.pointed_at())
                access = DataAccess.from_env()
                node = self.request.node.name.replace("[", "-").replace("]", "")
                maps_url = server.prefix_url(f"span-index/{node}/{entry_dir.name}")
                entry_url = bucket_store.Bucket(maps_url, access.object_store).publish(
                    "entry", str(entry_dir))
                tables = BucketRowTables(entry_url, split, access, chunk_samples=50)
        span_index = RowTableSpanIndex(
            tables, describe(datasets, plan.dataset_names), len(plan),
            dataset_fingerprints=dataset_fingerprints,
        )
        return GPTSource(span_index, options, **window(cfg), fingerprint=maps.fingerprint,
                         split=split, access=access)


@pytest.fixture
def opener(request, tmp_path):
    with contextlib.ExitStack() as stack:
        yield Opener(request, tmp_path, stack)


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

TODAY = {  # sha-256 (first 16 hex digits) of `_batches_digest` with the sources before the seam
    ("weighted", "everything", True, "train"): "ea6abc35f33fd6c2",
    ("weighted", "everything", True, "valid"): "23992374a103c214",
    ("weighted", "everything", False, "train"): "0a6a78f15cefe3b8",
    ("weighted", "everything", False, "valid"): "db53bcfaa96433dd",
    ("weighted", "megatron", True, "train"): "0000635c382a1f00",
    ("weighted", "megatron", True, "valid"): "d6dc41940aee1dd9",
    ("weighted", "megatron", False, "train"): "abb4895df03e8dda",
    ("weighted", "megatron", False, "valid"): "c9d2d0977b612f57",
    ("weighted", "plain", True, "train"): "9ecad64de9be56cb",
    ("weighted", "plain", True, "valid"): "2b7717c96c4e7a16",
    ("weighted", "plain", False, "train"): "c71edcff4717f4ef",
    ("weighted", "plain", False, "valid"): "bc3cab3bd8a6f75c",
    ("single", "everything", True, "train"): "29bd4f00610a04cc",
    ("single", "everything", True, "valid"): "a0abd2aed6305272",
    ("single", "everything", False, "train"): "b6ce5ef5185c1b2e",
    ("single", "everything", False, "valid"): "2c51f684c1feff6b",
    ("single", "megatron", True, "train"): "0fd89a2cca26a5dd",
    ("single", "megatron", True, "valid"): "baa9261c20aa914a",
    ("single", "megatron", False, "train"): "bd25e9c97ea51b37",
    ("single", "megatron", False, "valid"): "019d8c22a2feeb2f",
    ("single", "plain", True, "train"): "38501a37babb625f",
    ("single", "plain", True, "valid"): "993db41a290a3550",
    ("single", "plain", False, "train"): "19b95ac471a82c7b",
    ("single", "plain", False, "valid"): "2e11e01da54e8122",
}


def _id_batches(n):
    rng = np.random.default_rng(2)
    steps = [np.arange(lo, min(n, lo + 8)) for lo in range(0, n, 8)]
    return steps, [rng.integers(0, n, 12), np.array([n - 1, 0, 5000 % n, 0])]


def _batches_digest(source) -> str:
    """Digest of every batch form of `source` over a fixed set of id batches."""
    h = hashlib.sha256()

    def add(batch):
        for k in sorted(batch):
            h.update(k.encode())
            h.update(str(batch[k].dtype).encode())
            h.update(str(batch[k].shape).encode())
            h.update(np.ascontiguousarray(batch[k]).tobytes())

    steps, scattered = _id_batches(len(source))
    for ids in steps + scattered:
        add(source.read_batch(ids))
        add(source.get_batch(ids))
    text, valid = source.windows(steps[0])
    h.update(text.tobytes())
    h.update(valid.tobytes())
    add(source[3])
    add(source.get_batch(np.zeros(0, np.int64)))
    return h.hexdigest()[:16]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("extra", [True, False])
@pytest.mark.parametrize("opts", sorted(OPTIONS))
@pytest.mark.parametrize("blend", ["weighted", "single"])
def test_batches_equal_the_split_maps_and_todays(opener, prefixes, blend, opts, extra, kind):
    weights = ["30", prefixes[0], "50", prefixes[1], "20", prefixes[2]] if blend == "weighted" else [prefixes[1]]
    cfg = config(weights, extra=extra)
    options = GPTSchemaOptions(**OPTIONS[opts])
    for split in ("train", "valid"):
        planned, _, maps = opener.reference(cfg, options, split)
        source = opener.source(kind, cfg, options, split)
        assert len(source) == len(planned)
        assert source.fingerprint == planned.fingerprint
        assert source.fingerprint == gpt_source_fingerprint(maps.fingerprint, split, options, **window(cfg))
        assert source.dataset_names == planned.dataset_names
        assert source.reads_remote == (kind in BUCKET_KINDS)
        steps, scattered = _id_batches(len(planned))
        for ids in steps + scattered:
            assert_same(planned.read_batch(ids), source.read_batch(ids))
            assert_same(planned.get_batch(ids), source.get_batch(ids))
        text_p, valid_p = planned.windows(steps[0])
        text_r, valid_r = source.windows(steps[0])
        assert text_p.tobytes() == text_r.tobytes() and valid_p.tobytes() == valid_r.tobytes()
        assert_same(planned[3], source[3])
        empty = np.zeros(0, np.int64)
        assert_same(planned.get_batch(empty), source.get_batch(empty))
        assert _batches_digest(source) == TODAY[(blend, opts, extra, split)]


@pytest.mark.parametrize("kind", KINDS)
def test_far_apart_ids_and_group_order(opener, prefixes, kind):
    cfg = config(["50", prefixes[0], "50", prefixes[1]], samples=(20000, 10, 10))
    options = GPTSchemaOptions(eod_id=EOD, inter_document_masking=True)
    planned, _, _ = opener.reference(cfg, options)
    source = opener.source(kind, cfg, options)
    ids = np.array([19990, 3, 12000, 4, 19991, 3], np.int64)  # three row ranges, repeats
    assert_same(planned.read_batch(ids), source.read_batch(ids))


@pytest.mark.parametrize("kind", KINDS)
def test_only_touched_bins_are_opened(opener, prefixes, kind):
    cfg = config(["30", prefixes[0], "50", prefixes[1], "20", prefixes[2]])
    source = opener.source(kind, cfg, GPTSchemaOptions())
    table = row_table.build_row_table(opener.reference(cfg, source.options)[2].split("train"))
    ds_of_sample = table["dataset"][table["starts"][:-1]]
    ids = np.flatnonzero(ds_of_sample == 2)[:5]
    source.get_batch(ids)
    assert source.token_reader.opened == [2]
    ids = np.flatnonzero(ds_of_sample == 0)[:5]
    source.get_batch(ids)
    assert source.token_reader.opened == [0, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_pickled_sources_drop_handles_and_read_the_same(opener, prefixes, kind):
    cfg = config(["30", prefixes[0], "70", prefixes[1]])
    options = GPTSchemaOptions()
    planned, _, _ = opener.reference(cfg, options)
    source = opener.source(kind, cfg, options)
    ids = np.arange(10, 30)
    source.get_batch(ids)
    blob = pickle.dumps(source)
    if kind not in ("split_maps", "row_tables"):
        assert len(blob) < 4000  # the recipe, not the arrays
    clone = pickle.loads(blob)
    assert clone.token_reader.opened == [] and clone.requests_issued == 0
    assert_same(clone.get_batch(ids), planned.get_batch(ids))
    assert clone.token_reader.opened == [0, 1]


@pytest.mark.parametrize("kind", KINDS)
def test_loader_resumes_a_split_maps_run_on_every_span_index(opener, prefixes, kind):
    import jax
    from jax.sharding import Mesh

    from jaxblend.loading import PrefetchOptions, make_loader

    def batches(source, **kwargs):
        mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
        loader = make_loader(source, mesh, global_batch_size=8, **kwargs)
        return loader, [{k: np.asarray(v) for k, v in b.items()} for b in loader]

    cfg = config(["30", prefixes[0], "50", prefixes[1], "20", prefixes[2]], samples=(400, 10, 10))
    options = GPTSchemaOptions(eod_id=EOD, reset_attention_mask=True,
                               inter_document_masking=True)
    planned, _, _ = opener.reference(cfg, options)
    source = opener.source(kind, cfg, options)
    assert source.fingerprint == planned.fingerprint
    loader, full = batches(planned, num_steps=6)
    resumed_state = {**loader.state(), "step": 2}
    _, rest = batches(source, num_steps=6, state=resumed_state,
                      prefetch=PrefetchOptions(worker_count=1))  # pickled into a worker
    assert len(rest) == 4
    for got, want in zip(rest, full[2:], strict=True):
        assert_same(got, want)


@pytest.mark.parametrize("kind", KINDS)
def test_dataset_fingerprints_come_from_what_each_index_was_opened_with(opener, prefixes, kind):
    cfg = config(["30", prefixes[0], "70", prefixes[1]])
    options = GPTSchemaOptions()
    datasets, _ = opening.open_config_datasets(cfg, DataAccess())
    planned, _, _ = opener.reference(cfg, options)
    expected = {name: datasets[name].fingerprint for name in planned.dataset_names}
    assert planned.dataset_fingerprints == expected
    if kind.startswith("row_tables"):
        with pytest.raises(ValueError, match="built without its datasets' fingerprints"):
            opener.source(kind, cfg, options).dataset_fingerprints  # noqa: B018
    source = opener.source(kind, cfg, options, dataset_fingerprints=expected)
    assert source.dataset_fingerprints == expected


# ------------------------------------------------------------------------- row tables' .bin checks


def test_a_rewritten_local_bin_is_refused(opener, prefixes):
    cfg = config([prefixes[0]], samples=(40, 5, 5))
    options = GPTSchemaOptions()
    rows = opener.source("row_tables", cfg, options)
    bins = rows.span_index.bin_datasets
    stale = [BinDataset(d.prefix, d.dtype, d.bin_size, b"\0" * len(d.generation)) for d in bins]
    index_ = RowTableSpanIndex(rows.span_index.tables, stale, len(rows))
    source = GPTSource(index_, options, **window(cfg), fingerprint="f", split="train")
    with pytest.raises(IndexFormatError, match=r"a\.bin was rewritten after the index maps were published"):
        source.get_batch(np.arange(4))
    assert identity_memo.local_version(prefixes[0] + ".bin")[0] == bins[0].generation


@pytest.fixture
def uploaded(prefixes, object_store, request, opener):
    """The datasets in a bucket; (config over them, options, the in-memory split maps' source,
    access)."""
    base = f"span-index-bucket/{request.node.name}"
    urls = [object_store.upload(p, f"{base}/data/{p.rsplit('/', 1)[1]}") for p in prefixes]
    cfg = config(["30", urls[0], "50", urls[1], "20", urls[2]], samples=(400, 10, 10))
    options = GPTSchemaOptions(eod_id=EOD, reset_attention_mask=True,
                               inter_document_masking=True)
    access = DataAccess.from_env()
    planned, datasets, maps = opener.reference(cfg, options, access=access)
    return cfg, options, planned, datasets, maps, access


def _bucket_source(opener, uploaded, bins=None, chunk_samples=50):
    """A source over the bucket datasets through a row table read by range from the bucket."""
    cfg, options, planned, datasets, maps, access = uploaded
    plan = maps.split("train")
    entry_dir = opener.tmp_path / f"bucket-entry{opener._published}"
    opener._published += 1
    entries.save(str(entry_dir), "entry", row_table.named_arrays("train", row_table.build_row_table(plan)), {})
    maps_url = planned.dataset_names[0].rsplit("/", 2)[0] + f"/maps-{entry_dir.name}"
    entry_url = bucket_store.Bucket(maps_url, access.object_store).publish("entry", str(entry_dir))
    tables = BucketRowTables(entry_url, "train", access, chunk_samples=chunk_samples)
    bins = describe(datasets, plan.dataset_names) if bins is None else bins
    return GPTSource(RowTableSpanIndex(tables, bins, len(plan)), options, **window(cfg),
                     fingerprint=maps.fingerprint, split="train", access=access)


def test_bucket_rows_and_bins_equal_the_split_maps(opener, uploaded):
    planned = uploaded[2]
    source = _bucket_source(opener, uploaded)
    tables = source.span_index.tables
    assert source.reads_remote and planned.reads_remote
    n = len(planned)
    for lo in range(0, n, 37):  # steps crossing chunk boundaries
        ids = np.arange(lo, min(n, lo + 37))
        assert_same(planned.read_batch(ids), source.read_batch(ids))
    ids = np.array([n - 1, 0, 222, 223, 5], np.int64)
    assert_same(planned.get_batch(ids), source.get_batch(ids))
    assert len(tables) == n
    fresh = _bucket_source(opener, uploaded)
    steps = [np.arange(lo, min(n, lo + 16)) for lo in range(0, n, 16)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # reader threads, out of order
        for step_ids, got in zip(steps, pool.map(fresh.read_batch, steps)):
            assert_same(planned.read_batch(step_ids), got)
    assert tables.held_rows <= tables.cache_chunks * tables.chunk_samples + 37
    clone = pickle.loads(pickle.dumps(source))
    assert clone.span_index.tables.held_blocks == [] and clone.requests_issued == 0
    assert_same(clone.get_batch(ids), planned.get_batch(ids))
    assert clone.requests_issued > 0 and clone.bytes_read > 0
    assert planned.requests_issued > 0  # the split maps' source reads the same bucket `.bin`s


def test_a_rewritten_bucket_bin_is_refused(opener, uploaded):
    datasets, maps = uploaded[3], uploaded[4]
    bins = describe(datasets, maps.split("train").dataset_names)
    stale = [BinDataset(d.prefix, d.dtype, d.bin_size, b"99") for d in bins]
    source = _bucket_source(opener, uploaded, bins=stale)
    with pytest.raises(IndexFormatError, match=r"\.bin was rewritten after the index maps were "
                       r"published \(generation .*, maps built for 99\): publish the maps again"):
        source.get_batch(np.arange(4))


# ------------------------------------------------------------------------------- packed rows


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("extra", [True, False])
@pytest.mark.parametrize("opts", sorted(OPTIONS))
def test_packed_rows_are_the_same_through_every_span_index(opener, prefixes, opts, extra, kind):
    cfg = dataclasses.replace(
        config(["30", prefixes[0], "50", prefixes[1], "20", prefixes[2]], extra=extra),
        packing="best_fit", packing_window=50,
    )
    options = GPTSchemaOptions(**OPTIONS[opts])
    for split in ("train", "valid"):
        planned, _, maps = opener.reference(cfg, options, split)
        assert maps.split(split).is_packed
        source = opener.source(kind, cfg, options, split)
        assert len(source) == len(planned) and source.fingerprint == planned.fingerprint
        steps, scattered = _id_batches(len(planned))
        for ids in steps + scattered:
            assert_same(planned.read_batch(ids), source.read_batch(ids))
            assert_same(planned.get_batch(ids), source.get_batch(ids))
        assert_same(planned[3], source[3])

"""`open_gpt_sources` with an explicit `DataAccess`: the access (endpoint, map store, identity
memo) reaches every layer and every Grain worker, with nothing taken from the environment."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_publication import assert_same_batch, forbid_opening

from jaxblend import index
from jaxblend.access import DataAccess, IdentityStoreOptions, MapStoreOptions, ObjectStoreOptions
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.map_store import bucket
from jaxblend.sources import (
    GPTSchemaOptions,
    RowTableSpanIndex,
    SplitMapsSpanIndex,
    open_gpt_sources,
    open_validation_sets,
)
from jaxblend.storage.idx_format import IndexFormatError

SEQ, B = 16, 8
OPTIONS = GPTSchemaOptions()
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


@pytest.fixture(scope="module")
def local_prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("factory")
    rng = np.random.default_rng(8)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(1, 50), vocab=(1, 700))
        for n, d in (("a", 70), ("b", 110))
    ]


def _config(prefixes) -> index.GPTDataConfig:
    return index.GPTDataConfig(
        blend=["30", prefixes[0], "70", prefixes[1]], split="90,10,0", seq_length=SEQ, seed=9,
        num_samples=(B * 4, B, None),
    )


def _batches(source, workers: int) -> list[dict[str, np.ndarray]]:
    mesh = jax.make_mesh((8,), ("data",))
    loader = make_loader(
        source, mesh, global_batch_size=B, num_steps=3, prefetch=PrefetchOptions(worker_count=workers)
    )
    return [{k: np.asarray(v) for k, v in batch.items()} for batch in loader]


def test_explicit_access_reaches_the_map_store_and_a_worker(
    s3_server, local_prefixes, tmp_path, monkeypatch
):
    with s3_server.pointed_at():
        urls = [s3_server.upload(p, f"factory/{p.rsplit('/', 1)[1]}") for p in local_prefixes]
    for name in (*ENDPOINT_ENVS, "JAXBLEND_IDENTITY_CACHE", "JAXBLEND_INDEX_MIRROR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # a default mirror would land here
    maps_url = s3_server.prefix_url("factory/maps")
    access = DataAccess(
        object_store=ObjectStoreOptions(s3_endpoint=s3_server.url, max_retries=1),
        maps=MapStoreOptions(location=maps_url, mirror=str(tmp_path / "mirror"), builder=True),
        identity=IdentityStoreOptions(local_dir=str(tmp_path / "memo")),
    )
    remote = open_gpt_sources(_config(urls), OPTIONS, access=access)["train"]
    # The maps were built into the bucket map store (through the given mirror) ...
    committed = bucket.Bucket(maps_url, access.object_store)
    names = [p.parent.name for p in (tmp_path / "mirror").rglob("manifest.json")]
    assert names and all(committed.committed(n) for n in names)
    assert not (tmp_path / "jaxblend-index-mirror").exists()
    # ... the bucket datasets' identities went to <maps>/identity/ (the access's own default) ...
    with s3_server.pointed_at():
        keys = [bytes(k).decode() for k in s3_server.kvstore().list().result()]
    assert any(k.startswith("factory/maps/identity/") for k in keys), keys
    # ... and a Grain worker, which re-opens the split from the pickled access, reads the same bytes
    # as this process and as the local files.
    assert pickle.loads(pickle.dumps(remote)).access == access
    inline, worker = _batches(remote, 0), _batches(remote, 1)
    local = _batches(open_gpt_sources(_config(local_prefixes), OPTIONS)["train"], 0)
    for a, b, c in zip(inline, worker, local, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].tobytes() == b[name].tobytes(), name
        np.testing.assert_array_equal(a["inputs"], c["inputs"])


# --------------------------------------------------------------- sources from the publication


@pytest.fixture
def published(object_store, local_prefixes, tmp_path, request):
    """(config over the uploaded datasets, host(name, builder, wait) -> DataAccess, maps URL)."""
    base = f"factory-pub/{request.node.name}"
    urls = [object_store.upload(p, f"{base}/{p.rsplit('/', 1)[1]}") for p in local_prefixes]
    url = object_store.prefix_url(f"{base}/maps")

    def host(name: str, builder: bool, wait: float = 30.0) -> DataAccess:
        return DataAccess.from_env(maps=MapStoreOptions(
            location=url, mirror=str(tmp_path / name), builder=builder, wait_seconds=wait,
            poll_seconds=0.05,
        ))

    return _config(urls), host, url


def _split_maps(access: DataAccess) -> DataAccess:
    """`access` with its maps built in memory: sources over the whole split maps (the datasets
    opened) instead of the publication."""
    return access.with_maps(location=None, mirror=None)


@pytest.mark.parametrize("masking", [False, True])
def test_sources_from_the_record_equal_the_old_path(published, monkeypatch, masking):
    config, host, _url = published
    options = GPTSchemaOptions(inter_document_masking=masking)
    builder = host("builder", builder=True)
    old = open_gpt_sources(config, options, access=_split_maps(builder))
    built = open_gpt_sources(config, options, access=builder)
    forbid_opening(monkeypatch)
    read = open_gpt_sources(config, options, access=host("reader", builder=False))
    assert old["test"] is None and built["test"] is None and read["test"] is None
    for split in ("train", "valid"):
        assert isinstance(old[split].span_index, SplitMapsSpanIndex)
        for new in (built[split], read[split]):
            assert isinstance(new.span_index, RowTableSpanIndex)
            assert len(new) == len(old[split]) and new.fingerprint == old[split].fingerprint
            assert new.dataset_names == old[split].dataset_names
            ids = np.arange(len(new))[::-1].copy()
            assert_same_batch(new.get_batch(ids), old[split].get_batch(ids))
    # The builder maps its own row tables; another host reads them from the bucket by range.
    assert not built["train"].span_index.tables.is_remote
    assert read["train"].span_index.tables.is_remote
    assert read["train"].span_index.tables.requests > 0


def test_one_grain_worker_equals_none(published, monkeypatch):
    config, host, _url = published
    builder = host("builder", builder=True)
    open_gpt_sources(config, OPTIONS, access=builder)  # publishes
    old = open_gpt_sources(config, OPTIONS, access=_split_maps(builder))
    reader = host("reader", builder=False)
    source = open_gpt_sources(config, OPTIONS, access=reader, splits=("train",))["train"]
    assert isinstance(source.span_index, RowTableSpanIndex)
    assert pickle.loads(pickle.dumps(source)).access == reader
    inline, worker = _batches(source, 0), _batches(source, 1)
    reference = _batches(old["train"], 0)
    for a, b, c in zip(inline, worker, reference, strict=True):
        assert_same_batch(a, b)
        assert_same_batch(a, c)


def test_resumed_host_reads_only_the_rows_from_its_step(published):
    config, host, _url = published
    open_gpt_sources(config, OPTIONS, access=host("builder", builder=True))
    source = open_gpt_sources(config, OPTIONS, access=host("reader", builder=False))["train"]
    tables = source.span_index.tables
    # The rows each read fetches, counted exactly: no background read-ahead of the row table
    # (a read-ahead and a demand read can fetch overlapping rows at once; tests/sources/
    # test_row_tables.py covers it) and two steps read ahead by the loader, so at most three reads.
    tables.prefetch = False
    k = 2
    mesh = jax.make_mesh((8,), ("data",))
    loader = make_loader(source, mesh, global_batch_size=B, start_step=k,
                         prefetch=PrefetchOptions(worker_count=0, read_ahead=2))
    next(loader)  # global step k
    held, read = tables.held_blocks, tables.bytes_read
    assert held and all(lo >= k * B for lo, _ in held), held  # nothing before step k
    headers = 4 * 128  # the four .npy headers, read once

    def size(lo: int, hi: int) -> int:
        return sum(a.nbytes for a in tables.rows(lo, hi))

    # Its own step's rows and those it read ahead (steps > k), nothing else (each range read
    # carries one `starts` element past its end: 8 bytes per read, a few reads).
    assert any(lo <= k * B and (k + 1) * B <= hi for lo, hi in held), held
    assert size(k * B, (k + 1) * B) <= read - headers <= size(k * B, len(source)) + 8 * 4


def test_rewritten_dataset_is_refused(published, object_store, local_prefixes, tmp_path):
    config, host, _url = published
    open_gpt_sources(config, OPTIONS, access=host("builder", builder=True))
    target = config.blend[1].split("/", 3)[3] + ".bin"
    data = bytearray(Path(local_prefixes[0] + ".bin").read_bytes())
    data[0] ^= 1  # same size, other tokens: a new object generation (GCS) and ETag (S3)
    object_store.write(target, bytes(data))
    source = open_gpt_sources(config, OPTIONS, access=host("reader", builder=False))["train"]
    with pytest.raises(IndexFormatError) as err:
        source.get_batch(np.arange(len(source)))
    assert f"{config.blend[1]}.bin" in str(err.value) and "build_index" in str(err.value)


def test_validation_sets_from_their_publications(published, monkeypatch):
    config, host, _url = published
    per_split = dataclasses.replace(
        config, blend=None, split=None,
        blend_per_split=(config.blend, [config.blend[1], config.blend[3]], None),
    )
    builder = host("builder", builder=True)
    old = open_validation_sets(per_split, OPTIONS, access=_split_maps(builder))
    open_validation_sets(per_split, OPTIONS, access=builder)  # publishes one record per set
    forbid_opening(monkeypatch)
    new = open_validation_sets(per_split, OPTIONS, access=host("reader", builder=False))
    assert list(new) == list(old) == [config.blend[1], config.blend[3]]
    for prefix, source in new.items():
        assert isinstance(source.span_index, RowTableSpanIndex)
        assert source.fingerprint == old[prefix].fingerprint
        ids = np.arange(len(source))
        assert_same_batch(source.get_batch(ids), old[prefix].get_batch(ids))

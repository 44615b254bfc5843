"""Publishing a data plan to a bucket map store, and reading its record (fake-gcs-server, moto)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index, opening
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.index import row_table
from jaxblend.map_store import bucket, entries, load_or_build_data_maps, publication, record
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.reader import IndexedDataset


@pytest.fixture(scope="module")
def local_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(3)
    return {
        name: write_random_dataset(str(root / name), rng, docs, lengths=(3, 40))
        for name, docs in (("a", 120), ("b", 80))
    }


@pytest.fixture
def setup(object_store, local_data, tmp_path, request):
    """(config, host(name, builder, wait) -> DataAccess, map-store url)."""
    base = f"pub/{request.node.name}"
    prefixes = [object_store.upload(p, f"{base}/data/{n}") for n, p in local_data.items()]
    config = index.GPTDataConfig(
        blend=["40", prefixes[0], "60", prefixes[1]], split="80,20,0", seq_length=16,
        num_samples=(150, 20, 0),
    )
    url = object_store.prefix_url(f"{base}/cache")

    def host(name: str, builder: bool, wait: float = 30.0) -> DataAccess:
        return DataAccess.from_env(maps=MapStoreOptions(
            location=url, wait_seconds=wait, poll_seconds=0.05, builder=builder,
            mirror=str(tmp_path / name),
        ))

    return config, host, url


def test_record_round_trips_and_refuses_damage():
    table, _ = record.encode_table(
        "k" * 32, (record.PublishedDataset("gs://b/a", "<u2", 100, "0a", "f" * 32),), (), True
    )
    pub = record.Publication(
        "k" * 32, "p" * 32, table,
        {"train": record.PublishedSplit(7, (0,), "gs://b/c/p-rows/")},
    )
    data = pub.to_bytes()
    assert record.Publication.from_bytes(data, "gs://x") == pub
    damaged = data.replace(b'"length":7', b'"length":8')
    with pytest.raises(ValueError, match=r"publication record gs://x: .*checksum mismatch.*build_index"):
        record.Publication.from_bytes(damaged, "gs://x")
    with pytest.raises(ValueError, match="publication record gs://x: unreadable"):
        record.Publication.from_bytes(b"{half", "gs://x")


def test_launch_key_follows_the_configuration_as_written():
    config = index.GPTDataConfig(blend=["1", "gs://b/a"], split="90,10,0", seq_length=8)
    assert record.launch_key(config) == record.launch_key(
        index.GPTDataConfig(blend=["1", "gs://b/a"], split="90,10,0", seq_length=8)
    )
    for change in ({"seed": 5}, {"seq_length": 9}, {"split": "80,20,0"},
                   {"num_samples": (10, None, None)}, {"blend": ["1", "gs://b//a"]},
                   {"packing": "best_fit"}):
        other = index.GPTDataConfig(**{
            "blend": ["1", "gs://b/a"], "split": "90,10,0", "seq_length": 8, **change
        })
        assert record.launch_key(other) != record.launch_key(config), change


def test_configurations_differing_only_in_their_schedule_have_their_own_records():
    def staged(*stages):
        schedule = index.BlendSchedule(tuple(index.BlendStage(s, b) for s, b in stages))
        return index.GPTDataConfig(
            blend_per_split=[None, ["gs://b/v"], None], split="90,10,0", seq_length=8,
            num_samples=(100, 10, None), train_schedule=schedule,
        )

    first = staged((0, ["1", "gs://b/a"]), (50, ["1", "gs://b/a", "1", "gs://b/c"]))
    assert record.launch_key(first) == record.launch_key(
        staged((0, ["1", "gs://b/a"]), (50, ["1", "gs://b/a", "1", "gs://b/c"]))
    )
    for other in (
        staged((0, ["1", "gs://b/a"]), (60, ["1", "gs://b/a", "1", "gs://b/c"])),
        staged((0, ["1", "gs://b/a"]), (50, ["1", "gs://b/a", "3", "gs://b/c"])),
        staged((0, ["1", "gs://b/a"])),
    ):
        assert record.launch_key(other) != record.launch_key(first)


def test_publish_writes_rows_then_record(setup):
    config, host, url = setup
    access = host("builder", builder=True)
    done = publication.publish(config, access)
    assert done.written
    key = record.launch_key(config)
    assert done.url == record.record_url(url, key) and done.url.endswith(f"/published/{key}.json")
    reader = host("reader", builder=False)
    pub = publication.read(config, reader)
    assert pub == done.publication
    described = publication.table_reader(pub, reader).all()
    assert tuple(described) == done.datasets

    datasets, infos = opening.open_config_datasets(config, access)
    plan = load_or_build_data_maps(config, infos, access)
    assert pub.plan_key == plan.fingerprint
    for k, d in enumerate(described):
        ds = datasets[d.prefix]
        assert d.prefix == plan.prefixes[k]
        assert d.dtype == ds.dtype.str and d.bin_size == ds.num_tokens * ds.dtype.itemsize
        assert d.fingerprint == ds.fingerprint and len(d.generation) > 0
    remote = bucket.Bucket(url, access.object_store)
    rows_key = record.rows_entry(plan.fingerprint)
    assert remote.committed(rows_key)
    mirror = bucket.mirror_dir(url, access.maps)
    arrays, _ = entries.load(mirror, rows_key, "full")
    assert sorted(pub.splits) == ["train", "valid"]
    for name, split in pub.splits.items():
        maps = plan.split(name)
        assert split.length == len(maps)
        assert [described[k].prefix for k in split.datasets] == list(maps.dataset_names)
        assert split.rows_url == bucket.entry_url(url, rows_key)
        expected = row_table.build_row_table(maps)
        for field in row_table.FIELDS:
            np.testing.assert_array_equal(arrays[row_table.array_name(name, field)], expected[field])
    # The head is small whatever the number of datasets; the table a few hundred bytes each.
    body = remote.read_object(record.record_key(key))
    assert len(body) < 2000
    assert json.loads(body)["checksum"]
    table = remote.read_object(pub.table.key)
    assert len(table) == pub.table.size == len(described) * pub.table.width
    assert pub.table.width < 400


def test_rerun_with_unchanged_data_writes_nothing(setup, monkeypatch):
    config, host, _url = setup
    publication.publish(config, host("first", builder=True))

    def no_write(*args, **kwargs):
        raise AssertionError("a rerun wrote to the bucket")

    monkeypatch.setattr(bucket.Bucket, "write_object", no_write)
    monkeypatch.setattr(bucket.Bucket, "publish", no_write)
    again = publication.publish(config, host("second", builder=True))
    assert not again.written


def test_changed_data_publishes_anew(setup, object_store, local_data, tmp_path):
    config, host, _url = setup
    first = publication.publish(config, host("first", builder=True)).publication
    target = publication.table_reader(first, host("r0", builder=False)).get([1])[0].prefix
    changed = write_random_dataset(str(tmp_path / "b2"), np.random.default_rng(9), 80)
    object_store.upload(changed, target.split("/", 3)[3])
    done = publication.publish(config, host("second", builder=True))
    second = done.publication
    assert done.written and second.plan_key != first.plan_key
    assert second.table.key != first.table.key  # the table is named by its content
    reader = host("reader", builder=False)
    assert publication.read(config, reader) == second
    now = publication.table_reader(second, reader).all()
    before = publication.table_reader(first, reader).all()  # the old table is still there
    assert now[1].generation != before[1].generation and now[0] == before[0]


def test_non_builder_waits_then_fails_naming_the_record(setup, monkeypatch):
    config, host, url = setup

    def no_open(*args, **kwargs):
        raise AssertionError("a waiting host opened a dataset")

    monkeypatch.setattr(IndexedDataset, "__init__", no_open)
    with pytest.raises(TimeoutError) as err:
        publication.load_or_publish(config, host("reader", builder=False, wait=0.3))
    message = str(err.value)
    assert record.record_url(url, record.launch_key(config)) in message
    assert "--data_cache_wait" in message and "build_index" in message


def test_builder_publishes_when_absent_and_reader_takes_it(setup, monkeypatch):
    config, host, _url = setup
    built = publication.load_or_publish(config, host("builder", builder=True))

    def no_open(*args, **kwargs):
        raise AssertionError("a reading host opened a dataset")

    monkeypatch.setattr(IndexedDataset, "__init__", no_open)
    assert publication.load_or_publish(config, host("reader", builder=False)) == built


def test_waiting_host_with_a_missing_dataset_fails_at_once(setup):
    config, host, _url = setup
    missing = config.blend[1] + "_missing"
    broken = index.GPTDataConfig(blend=["40", missing, "60", config.blend[3]], split="80,20,0",
                                 seq_length=16, num_samples=(150, 20, 0))
    with pytest.raises(IndexFormatError, match=re.escape(f"{missing}.bin: data file does not exist")):
        publication.load_or_publish(broken, host("reader", builder=False, wait=60))
    publication.check_bins_exist(config, host("reader", builder=False))  # the real ones exist


def test_the_record_carries_tokenizer_facts_so_hosts_read_no_dataset_record(
    object_store, local_data, tmp_path, monkeypatch, request
):
    """The builder copies each dataset's preprocessing facts into the record; a host takes them
    from there (one request) instead of one record read per dataset."""
    from jaxblend import tokenizer_facts
    from jaxblend.tokenizer_facts import TokenizerFacts

    base = f"pub/{request.node.name}"
    facts = TokenizerFacts("HuggingFaceTokenizer sha256:0123456789ab", 1000, 0, None)
    prefixes = []
    for n, p in local_data.items():
        prefixes.append(object_store.upload(p, f"{base}/data/{n}_text_document"))
        run = {"status": "complete", "outputs": {"text": f"{n}_text_document"},
               "tokenizer_facts": facts.to_json(), "max_token_id": {"text": 900}}
        object_store.write(f"{base}/data/{n}.preprocess.json", json.dumps(run).encode())
    config = index.GPTDataConfig(
        blend=["40", prefixes[0], "60", prefixes[1]], split="80,20,0", seq_length=16,
        num_samples=(150, 20, 0),
    )
    access = DataAccess.from_env(maps=MapStoreOptions(
        location=object_store.prefix_url(f"{base}/cache"), builder=True,
        mirror=str(tmp_path / "m"),
    ))
    assert publication.published_tokenizers(config, access) is None  # nothing published yet
    publication.publish(config, access)
    published = publication.read(config, access)
    described = publication.table_reader(published, access).all()
    assert [d.tokenizer["max_token_id"] for d in described] == [900, 900]
    assert published.table.uniform and len(published.table.tokenizers) == 1

    def no_reads(prefix, access=None):
        raise AssertionError(f"read the record of {prefix}")

    monkeypatch.setattr(tokenizer_facts, "read_facts", no_reads)
    known = publication.published_tokenizers(config, access)
    got = tokenizer_facts.blend_facts(prefixes, access, known=known)
    expected = TokenizerFacts(facts.identity, 1000, 0, None, max_token_id=900)
    assert got == {p: expected for p in prefixes}


def test_packed_rows_read_from_the_publication_equal_the_local_maps(setup, tmp_path):
    import dataclasses

    from jaxblend.sources import GPTSchemaOptions, RowTableSpanIndex, open_gpt_sources

    config, host, _url = setup
    packed = dataclasses.replace(config, packing="best_fit", packing_window=30)
    assert record.launch_key(packed) != record.launch_key(
        dataclasses.replace(packed, packing_window=31)
    )
    options = GPTSchemaOptions(inter_document_masking=True)
    local = DataAccess.from_env(maps=MapStoreOptions(location=str(tmp_path / "local")))
    want = open_gpt_sources(packed, options, access=local)
    publication.load_or_publish(packed, host("builder", builder=True))
    got = open_gpt_sources(packed, options, access=host("reader", builder=False))
    for split in ("train", "valid"):
        assert isinstance(got[split].span_index, RowTableSpanIndex)
        assert got[split].fingerprint == want[split].fingerprint
        ids = np.array([0, 5, len(want[split]) - 1, 5])
        a, b = want[split].get_batch(ids), got[split].get_batch(ids)
        assert sorted(a) == sorted(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)

"""Sources over a publication of many datasets: a host describes (and opens) only the datasets
its rows reach, by range reads of the dataset table, and reads the same batches as the path that
opens every dataset."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_publication import assert_same_batch, forbid_opening

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.map_store.dataset_table import PublishedBins
from jaxblend.sources import GPTSchemaOptions, RowTableSpanIndex, open_gpt_sources

N, SEQ, B, STEPS = 40, 16, 8, 5
OPTIONS = GPTSchemaOptions()


@pytest.fixture(scope="module")
def many_local(tmp_path_factory):
    root = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(21)
    return [
        write_random_dataset(str(root / f"d{k:02d}"), rng, 12, lengths=(1, 40), vocab=(1, 700))
        for k in range(N)
    ]


@pytest.fixture
def many_published(object_store, many_local, tmp_path, request):
    """(config over N uploaded datasets, host(name, builder) -> DataAccess)."""
    base = f"many-pub/{request.node.name}"
    urls = [object_store.upload(p, f"{base}/{p.rsplit('/', 1)[1]}") for p in many_local]
    url = object_store.prefix_url(f"{base}/maps")
    blend = [v for u in urls for v in ("1", u)]
    config = index.GPTDataConfig(
        blend=blend, split="90,10,0", seq_length=SEQ, seed=4, num_samples=(B * STEPS, B, None),
    )

    def host(name: str, builder: bool) -> DataAccess:
        return DataAccess.from_env(maps=MapStoreOptions(
            location=url, mirror=str(tmp_path / name), builder=builder, wait_seconds=30,
            poll_seconds=0.05,
        ))

    return config, host


def test_a_host_describes_only_the_datasets_its_rows_reach(many_published, monkeypatch):
    config, host = many_published
    builder = host("builder", builder=True)
    open_gpt_sources(config, OPTIONS, access=builder)  # publishes
    old = open_gpt_sources(config, OPTIONS, access=builder.with_maps(location=None, mirror=None))
    forbid_opening(monkeypatch)
    source = open_gpt_sources(config, OPTIONS, access=host("reader", builder=False))["train"]
    index_ = source.span_index
    assert isinstance(index_, RowTableSpanIndex)
    bins = index_.bin_datasets
    assert isinstance(bins, PublishedBins) and len(bins) == N
    assert bins.described == [] and bins.requests == 0  # opening read no description
    touched: set[int] = set()
    for step in range(STEPS):
        ids = np.arange(step * B, (step + 1) * B)
        assert_same_batch(source.get_batch(ids), old["train"].get_batch(ids))
        touched |= set(index_.pieces(ids).dataset.tolist())
        assert bins.described == sorted(touched)  # those of the rows read, no other
        assert source.token_reader.opened == sorted(touched)
        if step == 0:
            assert len(touched) < N
            assert bins.requests <= 2  # the first batch's descriptions: one round of ranges
    assert source.fingerprint == old["train"].fingerprint
    assert source.dataset_names == old["train"].dataset_names  # read in full when asked for
    assert source.dataset_fingerprints == old["train"].dataset_fingerprints


def test_resume_on_another_mesh_reads_the_same_bytes_and_only_its_rows(many_published):
    config, host = many_published
    open_gpt_sources(config, OPTIONS, access=host("builder", builder=True))
    first = open_gpt_sources(config, OPTIONS, access=host("first", builder=False))["train"]
    full = jax.make_mesh((8,), ("data",))
    loader = make_loader(first, full, global_batch_size=B, num_steps=STEPS,
                         prefetch=PrefetchOptions(worker_count=0))
    reference = [{k: np.asarray(v) for k, v in batch.items()} for batch in loader]
    k = 3
    resumed = open_gpt_sources(config, OPTIONS, access=host("resumed", builder=False))["train"]
    half = jax.sharding.Mesh(np.array(jax.devices()[:4]), ("data",))
    loader = make_loader(resumed, half, global_batch_size=B, num_steps=STEPS, start_step=k,
                         prefetch=PrefetchOptions(worker_count=0))
    again = [{n: np.asarray(v) for n, v in batch.items()} for batch in loader]
    assert len(again) == STEPS - k
    for a, b in zip(again, reference[k:], strict=True):
        assert_same_batch(a, b)
    later = resumed.span_index.pieces(np.arange(k * B, len(resumed))).dataset
    described = resumed.span_index.bin_datasets.described
    assert described and set(described) <= set(later.tolist())  # nothing of the steps before k


def test_names_are_the_configurations_and_fingerprints_read_only_those_asked(many_published):
    """A host's split knows its dataset names without reading the table, and reads the
    descriptions of the datasets whose fingerprints it asks for, no other."""
    config, host = many_published
    old = open_gpt_sources(config, OPTIONS, access=host("builder", builder=True))["train"]
    source = open_gpt_sources(config, OPTIONS, access=host("reader", builder=False))["train"]
    bins = source.span_index.bin_datasets
    assert source.dataset_names == old.dataset_names
    assert bins.reader.held == [] and bins.requests == 0
    asked = [source.dataset_names[k] for k in (3, 30, 31)]
    every = old.dataset_fingerprints
    assert source.dataset_fingerprints_of(asked) == {n: every[n] for n in asked}
    assert bins.reader.held == [3, 30, 31]
    assert old.dataset_fingerprints_of(asked) == {n: every[n] for n in asked}  # as opened


def test_a_staged_history_reads_the_fingerprints_of_its_stages_so_far(many_published):
    """The resume history of a `--data_schedule` split (checked and saved with a loader state)
    asks for the datasets of the stages before its step alone, and gives the fingerprint the
    path that opens every dataset gives."""
    from jaxblend.loading.resume_history import GPTTrainHistory

    config, host = many_published
    names = index.config_prefixes(config)
    config = index.GPTDataConfig(
        train_schedule=index.BlendSchedule((
            index.BlendStage(0, ("1", names[0], "1", names[1])),
            index.BlendStage(2 * B, tuple(v for n in names[2:] for v in ("1", n))),
        )),
        split="100,0,0", seq_length=SEQ, seed=4, num_samples=(B * STEPS, None, None),
    )
    builder = host("builder", builder=True)
    opened = open_gpt_sources(config, OPTIONS, access=builder)["train"]  # publishes
    local = GPTTrainHistory(config, OPTIONS, opened.dataset_fingerprints_of)
    source = open_gpt_sources(config, OPTIONS, access=host("reader", builder=False))["train"]
    history = GPTTrainHistory(config, OPTIONS, source.dataset_fingerprints_of)
    table = source.span_index.bin_datasets.reader
    assert history(2 * B) == local(2 * B)
    assert table.held == [0, 1]  # stage 0's datasets: the table's first lines
    assert history(2 * B + 1) == local(2 * B + 1)
    assert table.held == list(range(N))

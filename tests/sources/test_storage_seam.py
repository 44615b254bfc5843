"""Sources use storage through `jaxblend.storage.protocols` and one read path (`SpanGather`)."""

from __future__ import annotations

import inspect
import pathlib

import numpy as np
import pytest
from helpers_data import write_random_dataset
from masked_testdata import tokenizer_info, write_documents

import jaxblend
from jaxblend import index
from jaxblend.sources import (
    BERTMaskedConfig,
    BERTSource,
    SequenceSource,
    T5MaskedConfig,
    T5Source,
    open_gpt_sources,
)
from jaxblend.sources.schema import GPTSchemaOptions
from jaxblend.storage import IndexedDataset
from jaxblend.storage.protocols import SequenceDataset, SequenceReader
from jaxblend.storage.span_gather import SpanGather

PACKAGE = pathlib.Path(jaxblend.__file__).parent


DATASET_MEMBERS = (
    "prefix", "fingerprint", "is_remote", "sequence_lengths", "document_indices", "__len__",
)
# Megatron-Core's reader surface plus metadata; every other read entry point is private to storage.
PUBLIC_DATASET_MEMBERS = {
    "get", "prefix", "backend", "is_remote", "exists", "object_store", "dtype", "fingerprint",
    "sequence_lengths", "sequence_pointers", "document_indices", "sequence_modes", "num_documents",
    "num_tokens", "close",
}


def test_storage_classes_provide_the_protocols():
    declared = {n for n in vars(SequenceDataset) if not n.startswith("_")} | {"__len__"}
    assert declared == set(DATASET_MEMBERS)
    missing = [m for m in DATASET_MEMBERS if not hasattr(IndexedDataset, m)]
    assert not missing, f"IndexedDataset lacks {missing} of SequenceDataset"
    assert list(inspect.signature(SequenceReader.read).parameters) == list(
        inspect.signature(SpanGather.read).parameters
    )
    assert SpanGather([]).requests == 0


def test_dataset_keeps_a_small_public_surface():
    public = {n for n in vars(IndexedDataset) if not n.startswith("_")}
    assert public == PUBLIC_DATASET_MEMBERS
    assert list(inspect.signature(IndexedDataset.get).parameters) == ["self", "i", "offset", "length"]


def test_no_byte_pointers_outside_storage():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "storage" not in path.relative_to(PACKAGE).parts
        and ("sequence_pointers" in path.read_text() or "_token_view" in path.read_text())
    ]
    assert not offenders, f"byte pointers handled outside jaxblend/storage in {offenders}"


@pytest.fixture
def counted_reads(monkeypatch):
    """Every `SpanGather.read` call, as the number of spans it was given."""
    calls: list[int] = []
    read = SpanGather.read

    def counting(self, dataset, *args, **kwargs):
        calls.append(int(dataset.size))
        return read(self, dataset, *args, **kwargs)

    monkeypatch.setattr(SpanGather, "read", counting)
    return calls


def test_masked_and_sequence_sources_read_once_per_batch(tmp_path, counted_reads):
    prefix = str(tmp_path / "docs")
    write_documents(prefix, 60, seed=2)
    opened = IndexedDataset(prefix)
    ids = np.arange(12)
    bert = BERTSource(opened, BERTMaskedConfig(random_seed=3, sequence_length=48, split="100,0,0"),
                      tokenizer_info())
    counted_reads.clear()
    bert.get_batch(ids)
    assert counted_reads == [int(np.diff(bert.sample_index[:12, :2]).sum())]  # one read
    t5 = T5Source(opened, T5MaskedConfig(random_seed=3, sequence_length=48, split="100,0,0",
                                         sequence_length_decoder=16), tokenizer_info())
    counted_reads.clear()
    t5.get_batch(ids)
    assert len(counted_reads) == 1
    sequences = SequenceSource(opened, max_length=16, pad_id=9)
    counted_reads.clear()
    batch = sequences.get_padded_batch(np.array([4, -1, 0]), 8)
    assert counted_reads == [2]
    np.testing.assert_array_equal(batch["tokens"][0, : batch["lengths"][0]], opened.get(4)[:8])
    np.testing.assert_array_equal(batch["tokens"][2, : batch["lengths"][2]], opened[0][:8])
    assert (batch["tokens"][1] == 9).all() and batch["lengths"][1] == 0
    assert (batch["tokens"][0, batch["lengths"][0]:] == 9).all()


def test_gpt_sources_read_once_per_batch(tmp_path, counted_reads):
    rng = np.random.default_rng(4)
    prefixes = [write_random_dataset(str(tmp_path / n), rng, 50, lengths=(1, 40)) for n in "ab"]
    config = index.GPTDataConfig(blend=["1", prefixes[0], "1", prefixes[1]], split="100,0,0",
                                 seq_length=16, seed=1, num_samples=(40, None, None))
    source = open_gpt_sources(config, GPTSchemaOptions(seq_length=16))["train"]
    counted_reads.clear()
    source.get_batch(np.arange(8))
    assert len(counted_reads) == 1

"""Sources use storage through `jaxblend.storage.protocols` and one read path (`TokenReader`)."""

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
from jaxblend.storage.protocols import SequenceDataset
from jaxblend.storage.sequence_spans import SequenceSpans
from jaxblend.storage.token_reader import TokenReader

PACKAGE = pathlib.Path(jaxblend.__file__).parent


DATASET_MEMBERS = (
    "prefix", "fingerprint", "is_remote", "sequence_lengths", "document_indices", "__len__",
)
# Megatron-Core's reader surface plus metadata; every other read entry point is private to storage.
PUBLIC_DATASET_MEMBERS = {
    "get", "prefix", "backend", "is_remote", "exists", "object_store", "dtype", "fingerprint",
    "sequence_lengths", "sequence_pointers", "document_indices", "sequence_modes", "num_documents",
    "num_tokens", "close", "access", "bin_dataset",
}


def test_storage_classes_provide_the_protocols():
    declared = {n for n in vars(SequenceDataset) if not n.startswith("_")} | {"__len__"}
    assert declared == set(DATASET_MEMBERS)
    missing = [m for m in DATASET_MEMBERS if not hasattr(IndexedDataset, m)]
    assert not missing, f"IndexedDataset lacks {missing} of SequenceDataset"
    assert list(inspect.signature(SequenceSpans.read).parameters) == [
        "self", "dataset", "sequence", "offset", "length", "out", "out_pos"
    ]  # reads in sequence units: the one `SequenceSpans`, over the one token reader
    assert SequenceSpans([]).requests == 0


def test_dataset_keeps_a_small_public_surface():
    public = {n for n in vars(IndexedDataset) if not n.startswith("_")}
    assert public == PUBLIC_DATASET_MEMBERS
    assert list(inspect.signature(IndexedDataset.get).parameters) == ["self", "i", "offset", "length"]
    # Every read option comes from the `DataAccess`: no backend or I/O knob of its own.
    assert list(inspect.signature(IndexedDataset).parameters) == ["prefix", "multimodal", "access"]


def test_no_class_calls_another_ones_private_members():
    """The read path's classes talk through public names only (`obj._x` on `self` is fine)."""
    import re

    offenders = []
    for module in ("storage/token_reader.py", "storage/sequence_spans.py", "storage/reader.py",
                   "sources/gpt_source.py", "sources/span_index.py", "sources/factory.py"):
        text = (PACKAGE / module).read_text()
        # `owner._name` where the owner is neither the object itself nor a private module (a
        # module path such as `jaxblend.storage._location` is not an object)
        for owner, name in re.findall(r"(?<![.\w])([A-Za-z][A-Za-z0-9_]*)\._([a-z][a-z0-9_]*)", text):
            if owner not in {"self", "cls"}:
                offenders.append(f"{module}: {owner}._{name}")
    assert not offenders, offenders


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
    """Every `TokenReader.read` call, as the number of ranges it was given."""
    calls: list[int] = []
    read = TokenReader.read

    def counting(self, dataset, offset, length, *args, **kwargs):
        calls.append(int(np.asarray(dataset).size))
        return read(self, dataset, offset, length, *args, **kwargs)

    monkeypatch.setattr(TokenReader, "read", counting)
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
    source = open_gpt_sources(config, GPTSchemaOptions())["train"]
    counted_reads.clear()
    source.get_batch(np.arange(8))
    assert len(counted_reads) == 1

"""Sources use storage through `jaxblend.storage.protocols` only: sequence units, no byte pointers."""

from __future__ import annotations

import inspect
import pathlib

import numpy as np
from masked_testdata import tokenizer_info, write_documents

import jaxblend
from jaxblend.sources import BERTMaskedConfig, BERTSource, SequenceSource
from jaxblend.storage import IndexedDataset
from jaxblend.storage.protocols import SequenceDataset, SequenceReader
from jaxblend.storage.span_gather import SpanGather

PACKAGE = pathlib.Path(jaxblend.__file__).parent


DATASET_MEMBERS = (
    "prefix", "fingerprint", "is_remote", "sequence_lengths", "document_indices", "__len__",
    "get_many",
)


def test_storage_classes_provide_the_protocols():
    declared = {n for n in vars(SequenceDataset) if not n.startswith("_")} | {"__len__"}
    assert declared == set(DATASET_MEMBERS)
    missing = [m for m in DATASET_MEMBERS if not hasattr(IndexedDataset, m)]
    assert not missing, f"IndexedDataset lacks {missing} of SequenceDataset"
    assert list(inspect.signature(SequenceDataset.get_many).parameters) == list(
        inspect.signature(IndexedDataset.get_many).parameters
    )
    assert list(inspect.signature(SequenceReader.read).parameters) == list(
        inspect.signature(SpanGather.read).parameters
    )
    assert SpanGather([]).requests == 0


def test_no_byte_pointers_outside_storage():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "storage" not in path.relative_to(PACKAGE).parts
        and ("sequence_pointers" in path.read_text() or "read_token_spans" in path.read_text())
    ]
    assert not offenders, f"byte pointers handled outside jaxblend/storage in {offenders}"


class _SequencesOnly:
    """A `SequenceDataset` that is not an `IndexedDataset`: sources must need nothing more."""

    def __init__(self, dataset: IndexedDataset):
        self._dataset = dataset
        self.prefix = dataset.prefix
        self.fingerprint = dataset.fingerprint
        self.is_remote = False
        self.sequence_lengths = dataset.sequence_lengths
        self.document_indices = dataset.document_indices
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self._dataset)

    def get_many(self, indices, offsets=None, lengths=None):
        self.reads.append(len(indices))
        return self._dataset.get_many(indices, offsets, lengths)


def test_sources_read_through_the_protocol_alone(tmp_path):
    prefix = str(tmp_path / "docs")
    write_documents(prefix, 60, seed=2)
    opened = IndexedDataset(prefix)
    only = _SequencesOnly(opened)
    config = BERTMaskedConfig(random_seed=3, sequence_length=48, split="100,0,0")
    via_protocol = BERTSource(only, config, tokenizer_info())
    ids = np.arange(12)
    got = via_protocol.get_batch(ids)
    assert only.reads == [int(np.diff(via_protocol.sample_index[:12, :2]).sum())]  # one read
    for key, value in BERTSource(opened, config, tokenizer_info()).get_batch(ids).items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    sequences = SequenceSource(_SequencesOnly(opened), max_length=16, pad_id=9)
    batch = sequences.get_padded_batch(np.array([4, -1, 0]), 8)
    np.testing.assert_array_equal(batch["tokens"][0, : batch["lengths"][0]], opened.get(4)[:8])
    assert (batch["tokens"][1] == 9).all() and batch["lengths"][1] == 0

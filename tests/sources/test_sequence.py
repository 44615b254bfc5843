"""SequenceSource: one sequence per sample, read through `SequenceSpans` (the one token reader); its identity."""

from __future__ import annotations

import numpy as np
import pytest

from jaxblend import IndexedDatasetBuilder
from jaxblend.sources import SequenceSource


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("sequences") / "seqs")
    rng = np.random.default_rng(2)
    with IndexedDatasetBuilder(path, np.uint16) as builder:
        for n in rng.integers(0, 40, 50).tolist():
            builder.add_sequence(rng.integers(1, 3000, n).astype(np.uint16))
            builder.end_document()
    return path


def test_fingerprint_is_the_content_and_the_padding(prefix):
    a = SequenceSource(prefix, max_length=16, pad_id=0)
    assert a.fingerprint == SequenceSource(prefix, max_length=16, pad_id=0).fingerprint
    assert a.fingerprint != SequenceSource(prefix, max_length=17, pad_id=0).fingerprint
    assert a.fingerprint != SequenceSource(prefix, max_length=16, pad_id=1).fingerprint


def test_batches_equal_the_dataset_rows(prefix):
    source = SequenceSource(prefix, max_length=16, pad_id=5)
    batch = source.get_batch(np.arange(len(source)))
    for i in range(len(source)):
        row = source.dataset[i][:16]
        np.testing.assert_array_equal(batch["tokens"][i, : row.size], row)
        assert (batch["tokens"][i, row.size :] == 5).all() and batch["lengths"][i] == row.size

"""MockSource: tokens are a fixed function of (seed, sample, position)."""

from __future__ import annotations

import numpy as np

from jaxblend.sources import GPTSchemaOptions, MockSource


def test_tokens_are_pinned():
    # Frozen outputs: benchmarks and dry runs compare against runs of earlier versions.
    source = MockSource(3, GPTSchemaOptions(seq_length=10), vocab_size=50, seed=1, mean_doc_length=4)
    assert source.windows(np.arange(3)).tolist() == [
        [18, 25, 24, 44, 33, 49, 13, 25, 23, 13, 25],
        [0, 44, 49, 28, 29, 2, 49, 37, 16, 48, 5],
        [32, 17, 47, 41, 31, 49, 4, 13, 49, 4, 21],
    ]


def test_rows_are_independent_of_the_batch():
    source = MockSource(64, GPTSchemaOptions(seq_length=16), vocab_size=100, seed=7)
    whole = source.windows(np.arange(64))
    np.testing.assert_array_equal(source.windows(np.array([40, 3])), whole[[40, 3]])
    other = MockSource(64, GPTSchemaOptions(seq_length=16), vocab_size=100, seed=8)
    assert not np.array_equal(other.windows(np.arange(64)), whole)

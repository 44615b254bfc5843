"""MockSource: tokens are a fixed function of (seed, sample, position)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxblend.sources import GPTSchemaOptions, MockSource


def test_tokens_are_pinned():
    # Frozen outputs: benchmarks and dry runs compare against runs of earlier versions.
    source = MockSource(3, GPTSchemaOptions(), seq_length=10, vocab_size=50, seed=1, mean_doc_length=4)
    assert source.windows(np.arange(3)).tolist() == [
        [18, 25, 24, 44, 33, 49, 13, 25, 23, 13, 25],
        [0, 44, 49, 28, 29, 2, 49, 37, 16, 48, 5],
        [32, 17, 47, 41, 31, 49, 4, 13, 49, 4, 21],
    ]


def test_rows_are_independent_of_the_batch():
    source = MockSource(64, GPTSchemaOptions(), seq_length=16, vocab_size=100, seed=7)
    whole = source.windows(np.arange(64))
    np.testing.assert_array_equal(source.windows(np.array([40, 3])), whole[[40, 3]])
    other = MockSource(64, GPTSchemaOptions(), seq_length=16, vocab_size=100, seed=8)
    assert not np.array_equal(other.windows(np.arange(64)), whole)


class TestFingerprint:
    OPTIONS = GPTSchemaOptions(eod_id=3)

    def make(self, options=OPTIONS, **kwargs):
        return MockSource(64, options, **{"seq_length": 16, "vocab_size": 100, "seed": 7, **kwargs})

    def test_a_new_defaulted_data_neutral_option_keeps_it(self):
        @dataclasses.dataclass(frozen=True)
        class WithNeutralOption(GPTSchemaOptions):
            read_hint: int = 4  # an option added later that leaves every window unchanged

        extended = self.make(WithNeutralOption(eod_id=3, read_hint=11))
        assert isinstance(extended.options, WithNeutralOption)
        assert extended.fingerprint == self.make().fingerprint
        np.testing.assert_array_equal(extended.get_batch(np.arange(4))["inputs"],
                                      self.make().get_batch(np.arange(4))["inputs"])

    @pytest.mark.parametrize(
        "options, kwargs",
        [(GPTSchemaOptions(eod_id=4), {}),
         (GPTSchemaOptions(eod_id=3, reset_position_ids=True), {}),
         (OPTIONS, {"seq_length": 17}),
         (OPTIONS, {"seed": 8}), (OPTIONS, {"vocab_size": 101}), (OPTIONS, {"mean_doc_length": 9})],
    )
    def test_a_data_changing_setting_changes_it(self, options, kwargs):
        assert self.make(options, **kwargs).fingerprint != self.make().fingerprint

    def test_equal_settings_give_equal_fingerprints(self):
        assert self.make().fingerprint == self.make().fingerprint
        assert len(self.make().fingerprint) == 32

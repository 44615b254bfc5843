"""MockSource: deterministic synthetic GPT samples, no files needed.

Sample i is a window of `seq_length + extra` tokens made of "documents" whose lengths and tokens
are pure functions of `(seed, i, position)` (hashed with `jaxblend.index.splitmix.splitmix64`),
each document ending in `eod_id`.
Useful for loader benchmarks, smoke tests and dry runs of a training loop.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from jaxblend import identity
from jaxblend.index.splitmix import splitmix64
from jaxblend.sources import base, schema
from jaxblend.validation import require_int


@numba.njit(cache=True, nogil=True)
def _mock_windows(sample_ids, seed, window, vocab_size, eod, mean_doc_length, out):  # pragma: no cover
    n_tokens = np.uint64(vocab_size - 1)
    for r in range(sample_ids.shape[0]):
        state = splitmix64(np.uint64(seed) * np.uint64(1000003) + np.uint64(sample_ids[r]))
        remaining = np.int64(0)
        for p in range(window):
            state = splitmix64(state)
            if remaining == 0:
                remaining = np.int64(state % np.uint64(2 * mean_doc_length)) + 1
                state = splitmix64(state)
            remaining -= 1
            if remaining == 0:
                out[r, p] = eod
            else:
                tok = np.int64(state % n_tokens)
                out[r, p] = tok if tok < eod else tok + 1


class MockSource(base.BatchSource):
    """Synthetic GPT source with the batch schema of `GPTSource`.

    Args:
      num_samples: length of the source.
      options: schema options (EOD handling); `eod_id` defaults to `vocab_size - 1`.
      seq_length: S, tokens per sample.
      add_extra_token_to_sequence: windows hold S + 1 tokens.
      vocab_size: tokens are in `[0, vocab_size)`.
      seed: changes every token.
      mean_doc_length: mean synthetic document length in tokens.
    """

    def __init__(
        self,
        num_samples: int,
        options: schema.GPTSchemaOptions,
        *,
        seq_length: int,
        add_extra_token_to_sequence: bool = True,
        vocab_size: int = 32000,
        seed: int = 0,
        mean_doc_length: int = 512,
    ):
        require_int("MockSource.num_samples", num_samples, 0)
        require_int("MockSource.vocab_size", vocab_size, 2)
        require_int("MockSource.mean_doc_length", mean_doc_length, 1)
        if options.fim is not None:
            raise ValueError(
                "fill-in-the-middle (--fim_data) needs real data and its tokenizer; mock data has "
                "neither: drop --fim_data or --mock_data"
            )
        self.num_samples = num_samples
        self.seq_length = int(seq_length)
        self.add_extra_token_to_sequence = bool(add_extra_token_to_sequence)
        self.window_length = schema.window_length(seq_length, add_extra_token_to_sequence)
        self.vocab_size = vocab_size
        self.seed = seed
        self.mean_doc_length = mean_doc_length
        eod = vocab_size - 1 if options.eod_id is None else options.eod_id
        if not 0 <= eod < vocab_size:
            raise ValueError(f"eod_id must be in [0, {vocab_size}), got {eod}")
        self.options = dataclasses.replace(options, eod_id=eod)

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (
            f"MockSource(num_samples={self.num_samples}, vocab_size={self.vocab_size}, "
            f"seed={self.seed}, mean_doc_length={self.mean_doc_length}, seq_length={self.seq_length}, "
            f"add_extra_token_to_sequence={self.add_extra_token_to_sequence}, "
            f"options={self.options})"
        )

    @property
    def fingerprint(self) -> str:
        return identity.fingerprint(
            "mock_source", 1, num_samples=self.num_samples, vocab_size=self.vocab_size,
            seed=self.seed, mean_doc_length=self.mean_doc_length,
            schema=self.options.identity_fields(self.seq_length, self.add_extra_token_to_sequence),
        )

    def windows(self, sample_ids: np.ndarray) -> np.ndarray:
        """Raw int32 token windows `[k, seq_length + extra]` of `sample_ids`."""
        ids = self._check_ids(sample_ids)
        out = np.empty((ids.size, self.window_length), np.int32)
        _mock_windows(
            ids, self.seed, self.window_length, self.vocab_size,
            self.options.eod_id, self.mean_doc_length, out,
        )
        return out

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = self._check_ids(sample_ids)
        n_valid = np.full(ids.size, self.window_length, np.int64)
        return schema.raw_windows(self.windows(ids), n_valid, np.zeros(ids.size, np.int32), ids)

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return schema.assemble_windows(raw, self.options, seq_length=self.seq_length)

    def get_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        return self.assemble_batch(self.read_batch(sample_ids))

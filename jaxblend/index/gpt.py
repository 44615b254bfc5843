"""All three GPT index maps of one dataset split, Megatron-Core's epoch logic.

See docs/format.md, 'GPT index maps'.

`build_gpt_index_maps` is the per-(dataset, split) unit: epochs from the requested sample count,
the separate-final-epoch decision (Megatron's 0.80 threshold), one `RandomState(seed)` consumed by
the document index shuffles then the shuffle index shuffles.

Megatron quirk kept on purpose: the length of a GPT dataset is every sample of its E epochs
(`len(maps)`), which can be far more than the number requested.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np

from jaxblend.index import document_index as document_index_lib
from jaxblend.index import sample_index as sample_index_lib
from jaxblend.index import shuffle_index as shuffle_index_lib

SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80
_INT32_MAX = int(np.iinfo(np.int32).max)
_INT64_MAX = int(np.iinfo(np.int64).max)


@dataclasses.dataclass(frozen=True)
class GPTIndexMaps:
    """The index maps of one GPT dataset split.

    Attributes:
      document_index: int32 sequence ids in stream order.
      sample_index: `[n + 1, 2]` (position in document_index, token offset), int32 or int64.
      shuffle_index: uint32 or int64 permutation of `[0, n)`.
    """

    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray

    def __len__(self) -> int:
        return int(self.sample_index.shape[0]) - 1


def num_epochs_for(
    tokens_per_epoch: int, num_samples: int | None, seq_length: int, add_extra_token: bool
) -> int:
    """Smallest E >= 1 with `E * T >= num_samples * S + extra` (1 when num_samples is None)."""
    if num_samples is None:
        return 1
    requested = num_samples * seq_length + (1 if add_extra_token else 0)
    if tokens_per_epoch <= 0:
        raise ValueError("tokens_per_epoch must be > 0 to draw samples")
    return max(1, -(-requested // tokens_per_epoch))


def separate_final_epoch_for(
    num_epochs: int,
    tokens_per_epoch: int,
    num_samples: int | None,
    seq_length: int,
    add_extra_token: bool,
) -> tuple[bool, int]:
    """Megatron's decision to shuffle the final epoch on its own.

    Returns:
      `(separate, samples_sans_final_epoch)`; the second value is meaningful when separate.
    """
    if num_epochs == 1 or num_samples is None:
        return False, 0
    extra = 1 if add_extra_token else 0
    sans = ((num_epochs - 1) * tokens_per_epoch - extra) // seq_length
    per_epoch = (tokens_per_epoch - extra) // seq_length
    final = num_samples - sans
    return final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch), sans


_RNGS = threading.local()


def _random_state(seed: int) -> np.random.RandomState:
    """`np.random.RandomState(seed)`'s state, in a per-thread generator re-seeded in place.

    Why: constructing a RandomState costs ~0.1 ms (default entropy seeding before the legacy
    seeding), `.seed(seed)` ~2 us; a 10,000-prefix plan builds 20,000 of them. Same state bits.
    """
    rng = getattr(_RNGS, "rng", None)
    if rng is None:
        rng = _RNGS.rng = np.random.RandomState(seed)
    else:
        rng.seed(seed)
    return rng


def build_gpt_index_maps(
    sequence_lengths: np.ndarray,
    documents: np.ndarray,
    num_samples: int | None,
    seq_length: int,
    seed: int,
    add_extra_token: bool = True,
    drop_last_partial_sequence: bool = True,
    *,
    name: str = "dataset",
    max_sequence_length: int | None = None,
) -> GPTIndexMaps:
    """Builds document, sample and shuffle index of one dataset split, bit-exact with Megatron.

    Args:
      sequence_lengths: int32 lengths of all sequences of the dataset.
      documents: the split's sequence ids (int32).
      num_samples: samples requested, or None for exactly one epoch.
      seq_length: S.
      seed: the RandomState seed (every dataset and split restarts from it).
      add_extra_token: samples of S + 1 tokens.
      drop_last_partial_sequence: False keeps a last partial sample (validation only in Megatron).
      name: dataset/split name for error messages.
      max_sequence_length: `sequence_lengths.max()` if known.

    Returns:
      The maps.

    Raises:
      ValueError: samples requested from a split with no tokens, or counts overflowing the
        index dtypes.
    """
    if seq_length <= 0 or seq_length > _INT32_MAX:
        raise ValueError(f"{name}: seq_length = {seq_length} must be in [1, {_INT32_MAX}]")
    if num_samples is not None and num_samples < 0:
        raise ValueError(f"{name}: num_samples = {num_samples} must be >= 0 or None")
    documents = np.asarray(documents, dtype=np.int32)
    tokens_per_epoch = int(np.sum(sequence_lengths[documents], dtype=np.int64))
    if tokens_per_epoch == 0 and num_samples == 0:
        # Nothing requested from an empty split (e.g. `--valid_samples=0`): empty maps.
        return GPTIndexMaps(
            np.zeros(0, np.int32), np.zeros((1, 2), np.int32), np.zeros(0, np.uint32)
        )
    if tokens_per_epoch == 0 and num_samples is not None:
        raise ValueError(
            f"{name}: the split has no tokens ({len(documents)} sequences) but num_samples = "
            f"{num_samples} were requested"
        )
    if num_samples is not None and num_samples * seq_length >= _INT64_MAX // 2:
        raise ValueError(f"{name}: num_samples = {num_samples} x seq_length overflows int64")
    num_epochs = num_epochs_for(tokens_per_epoch, num_samples, seq_length, add_extra_token)
    if num_epochs > _INT32_MAX:
        raise ValueError(f"{name}: num_samples = {num_samples} needs {num_epochs} epochs (> int32)")
    if num_epochs * len(documents) > _INT64_MAX // 4:
        raise ValueError(f"{name}: num_samples = {num_samples} overflows the document index")
    separate, sans = separate_final_epoch_for(
        num_epochs, tokens_per_epoch, num_samples, seq_length, add_extra_token
    )
    rng = _random_state(seed)
    doc_index = document_index_lib.build_document_index(documents, num_epochs, rng, separate)
    samples = sample_index_lib.build_sample_index(
        sequence_lengths,
        doc_index,
        seq_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token,
        max_sequence_length=max_sequence_length,
    )
    total = samples.shape[0] - 1
    shuffle = shuffle_index_lib.build_shuffle_index(sans if separate else total, total, rng)
    return GPTIndexMaps(document_index=doc_index, sample_index=samples, shuffle_index=shuffle)

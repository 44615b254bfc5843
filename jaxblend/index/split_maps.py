"""One split's final sample order, answered from a single place.

A `SplitMaps` holds the flat index arrays of a split (its constituent GPT datasets' document,
sample and shuffle indices laid end to end, plus the blend's dataset_index/dataset_sample_index)
and answers "which (dataset, sequence, token range) pieces make sample i". Sample i means exactly
Megatron's `dataset[i]` of the split's top-level dataset (BlendedDataset or GPTDataset).

Cost contract: `spans` resolves a whole batch in one compiled call (microseconds for 256 rows at
S = 2048); `pieces`/`locate` are per-sample conveniences. Arrays may be read-only memory maps.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numba
import numpy as np

from jaxblend.index import gpt


class Piece(NamedTuple):
    """Tokens `[start, stop)` of sequence `sequence_id` of dataset `dataset_id` of the split."""

    dataset_id: int
    sequence_id: int
    start: int
    stop: int


@dataclasses.dataclass(frozen=True)
class Spans:
    """All non-empty (or all) pieces of a batch of samples, row order then piece order.

    Attributes:
      row: int64, position of the sample in the `sample_ids` argument.
      dataset: int32, dataset id within the split (index into `SplitMaps.dataset_names`).
      sequence: int64, sequence id within that dataset.
      offset: int64, first token of the piece within the sequence.
      length: int64, number of tokens of the piece.
    """

    row: np.ndarray
    dataset: np.ndarray
    sequence: np.ndarray
    offset: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return int(self.row.shape[0])


@numba.njit(cache=True, nogil=True)
def resolve_samples(sample_ids, blended, dataset_index, dataset_sample_index):  # pragma: no cover
    # (dataset, sample within the dataset) of each sample id of a split (compiled; its callers are
    # the span kernels).
    k = sample_ids.shape[0]
    ds = np.empty(k, dtype=np.int64)
    local = np.empty(k, dtype=np.int64)
    for r in range(k):
        i = sample_ids[r]
        if blended:
            ds[r] = dataset_index[i]
            local[r] = dataset_sample_index[i]
        else:
            ds[r] = 0
            local[r] = i
    return ds, local


@numba.njit(cache=True, nogil=True)
def _spans_kernel(
    sample_ids,
    blended,
    dataset_index,
    dataset_sample_index,
    document_index,
    sample_index,
    shuffle_index,
    offsets,
    constituent_prefix,
    lengths,
    length_offsets,
    extra,
    keep_empty,
):  # pragma: no cover
    k = sample_ids.shape[0]
    ds, local = resolve_samples(sample_ids, blended, dataset_index, dataset_sample_index)
    begin = np.empty(k, dtype=np.int64)
    end = np.empty(k, dtype=np.int64)
    begin_off = np.empty(k, dtype=np.int64)
    end_off = np.empty(k, dtype=np.int64)
    total = 0
    for r in range(k):
        d = ds[r]
        j = np.int64(shuffle_index[offsets[d, 2] + local[r]])
        row = offsets[d, 1] + j
        begin[r] = sample_index[row, 0]
        begin_off[r] = sample_index[row, 1]
        end[r] = sample_index[row + 1, 0]
        end_off[r] = sample_index[row + 1, 1]
        total += end[r] - begin[r] + 1
    out_row = np.empty(total, dtype=np.int64)
    out_ds = np.empty(total, dtype=np.int32)
    out_seq = np.empty(total, dtype=np.int64)
    out_off = np.empty(total, dtype=np.int64)
    out_len = np.empty(total, dtype=np.int64)
    m = 0
    for r in range(k):
        d = ds[r]
        doc_base = offsets[d, 0]
        len_base = length_offsets[constituent_prefix[d]]
        for p in range(begin[r], end[r] + 1):
            seq = np.int64(document_index[doc_base + p])
            size = np.int64(lengths[len_base + seq])
            start = begin_off[r] if p == begin[r] else 0
            stop = end_off[r] + extra if p == end[r] else size
            stop = min(stop, size)
            if stop > start or keep_empty:
                out_row[m] = r
                out_ds[m] = d
                out_seq[m] = seq
                out_off[m] = start
                out_len[m] = max(stop - start, 0)
                m += 1
    return out_row[:m], out_ds[:m], out_seq[:m], out_off[:m], out_len[:m]


class SplitMaps:
    """The index maps of one split and the sample -> pieces resolution.

    Length semantics are Megatron's: a blend's length is its size (which may exceed the requested
    count by float rounding, e.g. weights [0.6, 0.3, 0.1] x 5000 -> 5003); a single GPT dataset's
    length is every sample of its E epochs, not the requested count.

    Zero-length pieces (a sample starting exactly at a sequence's end when
    add_extra_token_to_sequence is off) are omitted; the tokens are the same as Megatron's.
    """

    is_packed = False
    """Whether the samples are packed rows of whole documents (`packed_maps.PackedSplitMaps`)."""

    def __init__(
        self,
        name: str,
        dataset_names: tuple[str, ...],
        arrays: dict[str, np.ndarray],
        lengths: np.ndarray,
        length_offsets: np.ndarray,
        seq_length: int,
        add_extra_token: bool,
        megatron_dtypes: list[tuple[str, str]],
    ) -> None:
        # What every split holds whatever its samples are (GPT samples or packed rows): its names,
        # window, per-dataset `offsets` (`[J, 4]`, the number of samples last), the blend's arrays
        # and the sequence lengths; then its samples' own arrays (`_init_samples`).
        self.name = name
        self.dataset_names = dataset_names
        self.seq_length = int(seq_length)
        self.add_extra_token = bool(add_extra_token)
        self._offsets = np.ascontiguousarray(arrays["offsets"], dtype=np.int64)
        self._constituent_prefix = np.ascontiguousarray(
            arrays["constituent_prefix"], dtype=np.int64
        )
        self._dataset_index = arrays.get("dataset_index")
        self._dataset_sample_index = arrays.get("dataset_sample_index")
        self._lengths = lengths
        self._length_offsets = np.ascontiguousarray(length_offsets, dtype=np.int64)
        if self._dataset_index is not None:
            self._length = int(self._dataset_index.shape[0])
        else:
            self._length = int(self._offsets[0, 3])
            self._dummy_di = np.zeros(0, dtype=np.int16)
            self._dummy_dsi = np.zeros(0, dtype=np.int64)
        self._init_samples(arrays, megatron_dtypes)

    def _init_samples(
        self, arrays: dict[str, np.ndarray], megatron_dtypes: list[tuple[str, str]]
    ) -> None:
        """The arrays of the split's samples: Megatron's document, sample and shuffle indices."""
        self._document_index = arrays["document_index"]
        self._sample_index = arrays["sample_index"]
        self._shuffle_index = arrays["shuffle_index"]
        epochs = arrays.get("epochs")
        self._epochs = None if epochs is None else np.asarray(epochs, dtype=np.int64)
        self._megatron_dtypes = megatron_dtypes

    def _blend_arrays(self) -> tuple[bool, np.ndarray, np.ndarray]:
        """(blended, dataset_index, dataset_sample_index) as the span kernels take them (empty
        arrays for a single dataset)."""
        if self._dataset_index is None:
            return False, self._dummy_di, self._dummy_dsi
        return True, self._dataset_index, self._dataset_sample_index

    # -- sizes ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, len={self._length}, "
            f"datasets={len(self.dataset_names)}, blended={self.is_blended})"
        )

    @property
    def num_datasets(self) -> int:
        """Number of constituent datasets (1 for a plain GPT dataset)."""
        return len(self.dataset_names)

    @property
    def is_blended(self) -> bool:
        """True when the split is a BlendedDataset (even of one dataset)."""
        return self._dataset_index is not None

    @property
    def window(self) -> int:
        """Tokens per sample window: seq_length + 1 with the extra token, else seq_length."""
        return self.seq_length + (1 if self.add_extra_token else 0)

    @property
    def dataset_index(self) -> np.ndarray | None:
        """Blend dataset ids per position (int16, or int32 above 32766 datasets), or None."""
        return self._dataset_index

    @property
    def dataset_sample_index(self) -> np.ndarray | None:
        """Blend sample ids within each dataset (int64), or None."""
        return self._dataset_sample_index

    @property
    def is_staged(self) -> bool:
        """True for a staged train split (`jaxblend.index.blend_schedule`): each dataset's
        samples are one-epoch maps laid end to end (`dataset_epochs`)."""
        return self._epochs is not None

    def dataset_length(self, dataset_id: int) -> int:
        """Number of samples of constituent `dataset_id` (all E epochs)."""
        return int(self._offsets[dataset_id, 3])

    def dataset_epochs(self, dataset_id: int) -> int:
        """Epochs laid end to end in a staged split's dataset `dataset_id` (1 otherwise: a
        Megatron GPT dataset's epochs are one map)."""
        if not 0 <= dataset_id < self.num_datasets:
            raise IndexError(f"dataset_id {dataset_id} out of range [0, {self.num_datasets})")
        return 1 if self._epochs is None else int(self._epochs[dataset_id])

    def constituent(self, dataset_id: int, epoch: int | None = None) -> gpt.GPTIndexMaps:
        """Constituent `dataset_id`'s maps in Megatron's dtypes (views when the dtypes agree).

        Args:
          dataset_id: the dataset within the split.
          epoch: for a staged split, which of the dataset's one-epoch maps (epoch 0 is
            Megatron's); None = all of them, which needs the dataset to have one epoch.

        Raises:
          IndexError: a dataset id or epoch out of range.
          ValueError: `epoch=None` for a staged dataset of several epochs.
        """
        count = self.dataset_epochs(dataset_id)
        if epoch is None and count > 1:
            raise ValueError(
                f"dataset {dataset_id} ({self.dataset_names[dataset_id]}) of split {self.name!r} "
                f"holds {count} epochs laid end to end; ask constituent({dataset_id}, epoch=e)"
            )
        e = 0 if epoch is None else epoch
        if not 0 <= e < count:
            raise IndexError(f"epoch {epoch} out of range [0, {count}) of dataset {dataset_id}")
        doc0, smp0, shf0, n = (int(v) for v in self._offsets[dataset_id])
        doc1 = (
            int(self._offsets[dataset_id + 1, 0])
            if dataset_id + 1 < self.num_datasets
            else int(self._document_index.shape[0])
        )
        per_doc, per_epoch = (doc1 - doc0) // count, n // count
        rows = self._sample_index[smp0 + e * (per_epoch + 1) : smp0 + (e + 1) * (per_epoch + 1)]
        shuffle = self._shuffle_index[shf0 + e * per_epoch : shf0 + (e + 1) * per_epoch]
        if e:  # epoch e's positions are moved by e epochs (`staged_split`)
            rows = rows.astype(np.int64) - np.array([e * per_doc, 0])
            shuffle = shuffle.astype(np.int64) - e * (per_epoch + 1)
        sample_dtype, shuffle_dtype = self._megatron_dtypes[dataset_id]
        return gpt.GPTIndexMaps(
            document_index=self._document_index[doc0 + e * per_doc : doc0 + (e + 1) * per_doc],
            sample_index=rows.astype(sample_dtype, copy=False),
            shuffle_index=shuffle.astype(shuffle_dtype, copy=False),
        )

    # -- lookups -------------------------------------------------------------------------------
    def _check(self, i: int) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"sample index must be an int, got {type(i).__name__}")
        return int(self._check_many(np.array([i]))[0])

    def _check_many(self, sample_ids: np.ndarray) -> np.ndarray:
        ids = np.ascontiguousarray(sample_ids, dtype=np.int64)
        if ids.ndim != 1:
            raise ValueError(f"sample_ids must be 1-D, got shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self._length):
            bad = ids[(ids < 0) | (ids >= self._length)][0]
            raise IndexError(
                f"sample index {bad} out of range for split {self.name!r} of length {self._length}"
            )
        return ids

    def locate(self, i: int) -> tuple[int, int]:
        """`(dataset_id, sample within that dataset)` of sample i (before the dataset's shuffle)."""
        i = self._check(i)
        if self._dataset_index is None:
            return 0, i
        return int(self._dataset_index[i]), int(self._dataset_sample_index[i])

    def dataset_ids(self, sample_ids: np.ndarray) -> np.ndarray:
        """int32 dataset id of each sample id."""
        ids = self._check_many(sample_ids)
        if self._dataset_index is None:
            return np.zeros(ids.shape[0], dtype=np.int32)
        return np.asarray(self._dataset_index[ids], dtype=np.int32)

    def spans(self, sample_ids: np.ndarray, keep_empty: bool = False) -> Spans:
        """All pieces of the given samples (one compiled call; the loader's hot path).

        Args:
          sample_ids: int64 sample ids in `[0, len(self))`.
          keep_empty: also return empty pieces (a sample starting at the very end of a document
            has one), as Megatron counts them among a sample's documents.

        Returns:
          `Spans`; the pieces of a row hold at most `window` tokens, fewer when the dataset ran
          out (the caller pads).

        Raises:
          IndexError: a sample id out of range.
        """
        ids = self._check_many(sample_ids)
        row, ds, seq, off, length = _spans_kernel(
            ids,
            *self._blend_arrays(),
            self._document_index,
            self._sample_index,
            self._shuffle_index,
            self._offsets,
            self._constituent_prefix,
            self._lengths,
            self._length_offsets,
            np.int64(1 if self.add_extra_token else 0),
            keep_empty,
        )
        return Spans(row=row, dataset=ds, sequence=seq, offset=off, length=length)

    def pieces(self, i: int) -> list[Piece]:
        """The non-empty pieces of sample i, in order (stop exclusive)."""
        i = self._check(i)
        s = self.spans(np.array([i], dtype=np.int64))
        return [
            Piece(int(d), int(q), int(o), int(o + n))
            for d, q, o, n in zip(s.dataset, s.sequence, s.offset, s.length)
        ]

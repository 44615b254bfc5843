"""GPT sample index: where each fixed-length sample starts in the flattened document stream.

Row k of the `[n + 1, 2]` array is `(position in document_index, token offset)` of sample k's
first token; sample k ends where sample k+1 starts (plus `extra` shared token). The walk and the
sample count reproduce Megatron-Core's `build_sample_idx` exactly, including its quirks:

* with `drop_last_partial_sequence=False` the count is `ceil(float32(E*T - extra) / float32(S))`,
  i.e. computed in **float32** (large token counts round; a count that rounds up past the data
  produces degenerate trailing samples that end at the last token, which the caller pads);
* the count is over all E epochs (`(E*T - extra) // S`), not the number requested.
"""

from __future__ import annotations

import numba
import numpy as np

from jaxblend.validation import require_int

_INT32_MAX = int(np.iinfo(np.int32).max)


def num_samples_in(
    num_epochs: int,
    tokens_per_epoch: int,
    seq_length: int,
    add_extra_token: bool,
    drop_last_partial_sequence: bool,
) -> int:
    """The number of samples the sample index holds (Megatron's rule, float32 when keeping the
    last partial sample)."""
    extra = 1 if add_extra_token else 0
    total = num_epochs * tokens_per_epoch - extra
    if drop_last_partial_sequence:
        if total < 0:  # C++ integer division truncates toward zero
            return 0
        return total // seq_length
    return int(np.ceil(np.float32(total) / np.float32(seq_length)))


def sample_index_dtype(document_index_length: int, max_sequence_length: int) -> np.dtype:
    """int32 unless the document index length or the longest sequence exceeds int32."""
    if max(document_index_length, max_sequence_length) <= _INT32_MAX:
        return np.dtype(np.int32)
    return np.dtype(np.int64)


@numba.njit(cache=True, nogil=True)
def _sample_index_kernel(
    sizes, document_index, seq_length, extra, num_samples, out
):  # pragma: no cover
    position = np.int64(0)
    offset = np.int64(0)
    out[0, 0] = 0
    out[0, 1] = 0
    last = document_index.shape[0] - 1
    for k in range(1, num_samples + 1):
        remaining = np.int64(seq_length + extra)
        while remaining != 0:
            length = np.int64(sizes[document_index[position]]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - extra
                remaining = 0
            else:
                if position == last:
                    offset = np.int64(sizes[document_index[position]]) - extra
                    break
                position += 1
                offset = 0
        out[k, 0] = position
        out[k, 1] = offset


def build_sample_index(
    sequence_lengths: np.ndarray,
    document_index: np.ndarray,
    seq_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token: bool = True,
    max_sequence_length: int | None = None,
) -> np.ndarray:
    """Builds the GPT sample index (Megatron's `build_sample_idx`, bit for bit).

    Args:
      sequence_lengths: int32 lengths of every sequence of the dataset.
      document_index: int32 sequence ids in stream order (from `build_document_index`).
      seq_length: S > 0.
      num_epochs: E >= 1.
      tokens_per_epoch: T, tokens of one epoch of the split.
      drop_last_partial_sequence: False keeps a last partial sample (float32 count, see module).
      add_extra_token: samples hold S + 1 tokens, consecutive samples sharing one.
      max_sequence_length: `sequence_lengths.max()` if already known (selects the dtype).

    Returns:
      `[n + 1, 2]` array, int32 or int64 (Megatron's dtype rule).

    Raises:
      ValueError: seq_length <= 0, num_epochs <= 0, or an empty document index with samples.
    """
    require_int("seq_length", seq_length, 1)
    require_int("num_epochs", num_epochs, 1)
    n = num_samples_in(
        num_epochs, tokens_per_epoch, seq_length, add_extra_token, drop_last_partial_sequence
    )
    if max_sequence_length is None:
        max_sequence_length = int(sequence_lengths.max()) if len(sequence_lengths) else 0
    dtype = sample_index_dtype(len(document_index), max_sequence_length)
    out = np.empty((n + 1, 2), dtype=dtype)
    if n > 0 and len(document_index) == 0:
        raise ValueError(f"cannot build {n} samples from an empty document index")
    _sample_index_kernel(
        sequence_lengths,
        document_index,
        np.int64(seq_length),
        np.int64(1 if add_extra_token else 0),
        np.int64(n),
        out,
    )
    return out

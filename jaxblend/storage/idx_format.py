"""The `.idx` file format of a Megatron-Core IndexedDataset: bytes <-> numpy arrays.

This module is the storage layer's single source of truth about the on-disk index layout
(docs/format.md, 'The .idx file'). It does no I/O of its own: callers hand it a byte buffer (an
mmap, bytes read through TensorStore) and get zero-copy numpy views back, or hand it arrays and get
the encoded bytes. Every structural problem is reported as an `IndexFormatError` naming the file
and what is wrong.

Layout (little-endian, packed)::

    0          magic b"MMIDIDX\\x00\\x00"                   9 bytes
    9          version = 1                                u64
    17         token dtype code                           u8
    18         sequence count N                           u64
    26         document count D (= documents + 1)          u64
    34         sequence_lengths[N]                        int32
    34+4N      sequence_pointers[N] (byte offsets in .bin) int64
    34+12N     document_indices[D]                        int64
    34+12N+8D  sequence_modes[N] (multimodal only)        int8

Multimodal detection rule: the file length says whether modes are present. Without modes the file is
exactly `34 + 12N + 8D` bytes, with modes `34 + 13N + 8D`; for N > 0 these differ, so the rule is
unambiguous. For N == 0 both coincide and `sequence_modes` is `None` unless the caller asked for a
multimodal read (then it is an empty int8 array).
"""

from __future__ import annotations

import dataclasses
import mmap
import struct
from typing import BinaryIO, TypeAlias

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34
_HEADER_STRUCT = struct.Struct("<9sQBQQ")

Buffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap | np.ndarray

# Megatron-Core's DType enum codes.
_CODE_TO_DTYPE: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
_DTYPE_TO_CODE: dict[np.dtype, int] = {v: k for k, v in _CODE_TO_DTYPE.items()}

# Vocabularies below this size fit uint16 token ids (Megatron's cutoff, not 65536).
_UINT16_VOCAB_CUTOFF = 65500

# Pointer validation works through the arrays in blocks of this many sequences so that checking a
# huge index never allocates temporaries proportional to the corpus.
_VALIDATION_BLOCK = 1 << 22


class IndexFormatError(ValueError):
    """An IndexedDataset file is missing, malformed, or disagrees with its companion file."""


@dataclasses.dataclass(frozen=True)
class IndexHeader:
    """The fixed 34-byte header of an `.idx` file.

    Attributes:
        dtype: token dtype of the companion `.bin`.
        sequence_count: N, the number of sequences.
        document_count: D, the length of `document_indices` (number of documents + 1).
    """

    dtype: np.dtype
    sequence_count: int
    document_count: int


@dataclasses.dataclass(frozen=True)
class IndexArrays:
    """The decoded contents of an `.idx` file (numpy views over the caller's buffer).

    Attributes:
        dtype: token dtype.
        sequence_lengths: int32[N] tokens per sequence.
        sequence_pointers: int64[N] byte offset of each sequence in the `.bin`.
        document_indices: int64[D] sequence index where each document starts; last entry is N.
        sequence_modes: int8[N] per-sequence modality, or None for non-multimodal data.
    """

    dtype: np.dtype
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray
    sequence_modes: np.ndarray | None

    @property
    def num_tokens(self) -> int:
        """Total number of tokens implied by the index (the `.bin` length in items)."""
        if self.sequence_lengths.shape[0] == 0:
            return 0
        last = int(self.sequence_pointers[-1]) // self.dtype.itemsize  # the last sequence's start
        return last + int(self.sequence_lengths[-1])


def dtype_code(dtype: np.typing.DTypeLike) -> int:
    """Returns the `.idx` code of a token dtype.

    Args:
        dtype: one of uint8, int8, int16, int32, int64, float64, float32, uint16.

    Returns:
        The integer code stored at byte 17 of the `.idx` header.

    Raises:
        ValueError: if the dtype has no code in the format.
    """
    d = np.dtype(dtype)
    if d not in _DTYPE_TO_CODE:
        allowed = ", ".join(str(x) for x in _DTYPE_TO_CODE)
        raise ValueError(f"dtype {d} is not storable in an IndexedDataset; allowed: {allowed}")
    return _DTYPE_TO_CODE[d]


def token_dtype_for_vocab(vocab_size: int) -> np.dtype:
    """Returns the smallest token dtype Megatron-Core uses for a vocabulary.

    Args:
        vocab_size: number of token ids, > 0.

    Returns:
        `np.dtype(np.uint16)` if `vocab_size < 65500`, else `np.dtype(np.int32)`.

    Raises:
        TypeError: if `vocab_size` is not an integer.
        ValueError: if `vocab_size` is not positive.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be > 0, got {vocab_size}")
    return np.dtype(np.uint16) if vocab_size < _UINT16_VOCAB_CUTOFF else np.dtype(np.int32)


def parse_header(buf: Buffer, name: str) -> IndexHeader:
    """Decodes and checks the fixed header at the start of an `.idx` buffer (at least its first
    34 bytes; `name` for messages).

    Raises:
        IndexFormatError: on a short buffer, wrong magic, unknown version or dtype code.
    """
    view = memoryview(buf).cast("B")
    if view.nbytes < HEADER_SIZE:
        raise IndexFormatError(
            f"{name}: truncated index: {view.nbytes} bytes, shorter than the {HEADER_SIZE}-byte header"
        )
    magic, version, code, n, d = _HEADER_STRUCT.unpack(view[:HEADER_SIZE])
    if magic != MAGIC:
        raise IndexFormatError(
            f"{name}: not an IndexedDataset index: magic {magic!r}, expected {MAGIC!r}"
        )
    if version != VERSION:
        raise IndexFormatError(
            f"{name}: unsupported index version {version} (supported: {VERSION})"
        )
    if code not in _CODE_TO_DTYPE:
        raise IndexFormatError(
            f"{name}: unknown token dtype code {code} (known codes: {sorted(_CODE_TO_DTYPE)})"
        )
    return IndexHeader(dtype=_CODE_TO_DTYPE[code], sequence_count=n, document_count=d)


def parse_index(buf: Buffer, name: str, *, multimodal: bool | None = None) -> IndexArrays:
    """Decodes an entire `.idx` buffer into zero-copy numpy views and validates it.

    Args:
        buf: the complete file contents (bytes, mmap, memoryview).
        name: the file's name in messages.
        multimodal: None to detect modes from the file length (see module docstring); True to
            require modes; False to ignore modes if present (as Megatron-Core does).

    Returns:
        The decoded arrays; they alias `buf`, so keep `buf` alive while they are used.

    Raises:
        IndexFormatError: if the header is bad, the file length disagrees with the counts, or the
            arrays are inconsistent (see `validate_arrays`).
    """
    header = parse_header(buf, name)
    view = memoryview(buf).cast("B")
    size = view.nbytes
    n, d = header.sequence_count, header.document_count
    if d < 1:
        raise IndexFormatError(f"{name}: document count is {d}; it must be >= 1 (documents + 1)")
    plain = HEADER_SIZE + 12 * n + 8 * d
    with_modes = plain + n  # one int8 mode per sequence
    has_modes = n > 0 and size == with_modes
    if not has_modes and size != plain:
        raise IndexFormatError(
            f"{name}: file is {size} bytes but its header (N={n} sequences, D={d} document indices) "
            f"implies {plain} bytes ({with_modes} with multimodal modes); the file is truncated or corrupt"
        )
    if multimodal and not has_modes and n > 0:
        raise IndexFormatError(
            f"{name}: multimodal=True but the file holds no sequence modes ({size} bytes, N={n}, D={d})"
        )
    lengths = np.frombuffer(view, dtype="<i4", count=n, offset=HEADER_SIZE)
    pointers = np.frombuffer(view, dtype="<i8", count=n, offset=HEADER_SIZE + 4 * n)
    doc_idx = np.frombuffer(view, dtype="<i8", count=d, offset=HEADER_SIZE + 12 * n)
    modes: np.ndarray | None = None
    if has_modes and multimodal is not False:
        modes = np.frombuffer(view, dtype=np.int8, count=n, offset=plain)  # after the indices
    elif multimodal and n == 0:
        modes = np.zeros(0, dtype=np.int8)
    arrays = IndexArrays(header.dtype, lengths, pointers, doc_idx, modes)
    validate_arrays(arrays, name)
    return arrays


def validate_arrays(arrays: IndexArrays, name: str) -> None:
    """Checks the internal consistency of decoded index arrays (vectorized, blockwise).

    Checks: lengths >= 0; document_indices start at 0, end at N and never decrease; pointers are
    the running byte offsets of the sequences (`pointers[i] = itemsize * sum(lengths[:i])`).
    `name` is the file's name in messages.

    Raises:
        IndexFormatError: naming the first inconsistency found.
    """
    lengths, pointers = arrays.sequence_lengths, arrays.sequence_pointers
    doc_idx = arrays.document_indices
    n = lengths.shape[0]
    if doc_idx[0] != 0:
        raise IndexFormatError(f"{name}: document_indices[0] is {int(doc_idx[0])}, expected 0")
    if doc_idx[-1] != n:
        raise IndexFormatError(
            f"{name}: document_indices[-1] is {int(doc_idx[-1])}, expected the sequence count {n}"
        )
    itemsize = arrays.dtype.itemsize
    running = 0  # byte offset where the current block starts
    for lo in range(0, max(n, doc_idx.shape[0]), _VALIDATION_BLOCK):
        hi = lo + _VALIDATION_BLOCK
        if lo < doc_idx.shape[0] - 1:
            block = doc_idx[lo : min(hi + 1, doc_idx.shape[0])]
            bad = np.flatnonzero(block[1:] < block[:-1])
            if bad.size:
                k = lo + int(bad[0])
                raise IndexFormatError(
                    f"{name}: document_indices decrease at position {k + 1} "
                    f"({int(doc_idx[k])} -> {int(doc_idx[k + 1])})"
                )
        if lo >= n:
            continue
        lens = lengths[lo:hi]
        neg = np.flatnonzero(lens < 0)
        if neg.size:
            k = lo + int(neg[0])
            raise IndexFormatError(f"{name}: sequence_lengths[{k}] is negative ({int(lengths[k])})")
        nbytes = lens.astype(np.int64) * itemsize
        expected = np.cumsum(nbytes) - nbytes + running
        bad = np.flatnonzero(pointers[lo:hi] != expected)
        if bad.size:
            k = lo + int(bad[0])
            raise IndexFormatError(
                f"{name}: sequence_pointers[{k}] is {int(pointers[k])}, expected {int(expected[bad[0]])} "
                f"(the running byte offset of the sequences)"
            )
        running = int(expected[-1]) + int(nbytes[-1])


def check_bin_size(arrays: IndexArrays, bin_size: int, idx_name: str, bin_name: str) -> None:
    """Checks that a `.bin` of `bin_size` bytes has exactly the length its (validated) index
    implies; the names are the files' in the message.

    Raises:
        IndexFormatError: if the sizes disagree.
    """
    expected = arrays.num_tokens * arrays.dtype.itemsize
    if bin_size != expected:
        raise IndexFormatError(
            f"{bin_name}: data file is {bin_size} bytes but {idx_name} implies {expected} bytes "
            f"({arrays.num_tokens} tokens of {arrays.dtype}); the pair is truncated or mismatched"
        )


def write_index(
    f: BinaryIO,
    dtype: np.typing.DTypeLike,
    lengths: np.ndarray,
    document_indices: np.ndarray,
    modes: np.ndarray | None,
) -> int:
    """Writes a complete `.idx` file (Megatron-Core byte layout) to a binary file object.

    Args:
        f: destination, positioned at 0.
        dtype: token dtype.
        lengths: int32-representable sequence lengths.
        document_indices: document boundaries (0 first, N last).
        modes: int8 modes for multimodal data, else None.

    Returns:
        The number of bytes written.
    """
    d = np.dtype(dtype)
    lengths32 = np.ascontiguousarray(lengths, dtype="<i4")
    docs = np.ascontiguousarray(document_indices, dtype="<i8")
    pointers = np.cumsum(lengths32, dtype="<i8")  # byte offsets: the exclusive running sum
    pointers -= lengths32
    pointers *= d.itemsize
    header = (MAGIC, VERSION, dtype_code(d), lengths32.shape[0], docs.shape[0])
    parts = [_HEADER_STRUCT.pack(*header), lengths32, pointers, docs]
    if modes is not None:
        parts.append(np.ascontiguousarray(modes, dtype=np.int8))
    views = [memoryview(part).cast("B") for part in parts]
    f.writelines(views)
    return sum(view.nbytes for view in views)

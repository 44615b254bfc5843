"""The one compiled gather kernel of the storage layer (Numba, cached on disk).

`gather` copies spans out of several flat sources into one destination, converting to the
destination's dtype. A *source* is a flat array given by its address and item count. It serves
every read:

* memory-mapped datasets: sources are the `.bin` token arrays (`token_reader.TokenReader`, for the
  ranges of a whole batch across datasets, and so for `IndexedDataset.get` and `dataset[i]`);
* object stores: sources are the downloaded byte buffers of coalesced range reads
  (`object_store.RangeRead` places them), then the downloaded tokens of each dataset when they
  need a dtype conversion (`place_runs`).

`sequence_starts` is its companion for callers that speak in sequences: `.bin` token offsets of
(sequence, offset) positions from the `.idx` byte pointers of several datasets
(`sequence_spans.SequenceSpans`).

Plain address arrays (rather than typed lists of arrays) keep the kernel in Numba's on-disk cache,
so a new process (a Grain worker) does not compile it again. The caller keeps the arrays behind the
addresses alive during the call.
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _typed_pointer(typingctx, address, like):  # pragma: no cover - compiled
    """`address` (an int64) as a pointer to `like`'s dtype, for `numba.carray`."""
    sig = types.CPointer(like.dtype)(types.int64, like)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_data_type(like.dtype).as_pointer())

    return sig, codegen


@intrinsic
def _copy_bytes(typingctx, dst, src, nbytes):  # pragma: no cover - compiled
    """`memcpy(dst, src, nbytes)` on int64 addresses (LLVM's memcpy: libc's for large copies)."""
    sig = types.void(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        d, s, n = args
        cgutils.raw_memcpy(
            builder, builder.inttoptr(d, cgutils.voidptr_t), builder.inttoptr(s, cgutils.voidptr_t), n, 1
        )
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _same_dtype(typingctx, a, b):  # pragma: no cover - compiled
    """Whether two arrays have one dtype: a compile-time constant."""
    same = a.dtype == b.dtype
    sig = types.boolean(a, b)

    def codegen(context, builder, signature, args):
        return cgutils.true_bit if same else cgutils.false_bit

    return sig, codegen


@numba.njit(nogil=True, cache=True)
def gather(
    member, token_addr, token_count, like, span_source, span_offset, span_length, out, out_pos,
):  # pragma: no cover - compiled
    """Copies the spans whose source is a member; returns (the first bad span or -1, items copied).

    Source d is a member when `member[d] >= 0`; member m's items are `token_count[m]` items of
    `like.dtype` at `token_addr[m]`. Span j is items `[span_offset[j], span_offset[j] +
    span_length[j])` of source `span_source[j]`, copied to `out[out_pos[j] : out_pos[j] +
    span_length[j]]` (converted to `out.dtype`; a `memcpy` when the dtypes agree, 2-3x faster than
    an element loop for windows of thousands of tokens). Empty spans are skipped. A span naming a
    source outside `member`, or leaving its source's items or `out`, stops the copy: its index is
    returned, so callers need no checks of their own on the fast path.
    """
    copied = 0
    for j in range(span_source.shape[0]):
        n = span_length[j]
        if n <= 0:
            continue
        d = span_source[j]
        if d < 0 or d >= member.shape[0]:
            return j, copied
        m = member[d]
        if m < 0:
            continue
        start = span_offset[j]
        p = out_pos[j]
        if start < 0 or start + n > token_count[m] or p < 0 or p + n > out.shape[0]:
            return j, copied
        src = numba.carray(_typed_pointer(token_addr[m], like), (token_count[m],))
        if _same_dtype(out, like):
            itemsize = src.itemsize
            _copy_bytes(out.ctypes.data + p * itemsize, token_addr[m] + start * itemsize, n * itemsize)
        else:
            out[p : p + n] = src[start : start + n]
        copied += n
    return -1, copied


def place_buffers(
    buffers: list[bytes], group: np.ndarray, rel: np.ndarray, nbytes: np.ndarray,
    dst: np.ndarray, out: np.ndarray,
) -> None:
    """Copies `buffers[group[j]][rel[j] : rel[j] + nbytes[j]]` to `out[dst[j] : dst[j] + nbytes[j]]`
    with `gather` (each buffer one source).

    Args:
      buffers: one bytes object per coalesced read.
      group, rel, nbytes, dst: int64[k] buffer index, byte offset in it, size, byte offset in `out`.
      out: 1-D uint8 C-contiguous destination.

    Raises:
      IndexError: if a span leaves its buffer (a short read).
    """
    if group.shape[0] == 0:
        return
    addresses = np.fromiter((_address(b) for b in buffers), np.int64, count=len(buffers))
    sizes = np.fromiter((len(b) for b in buffers), np.int64, count=len(buffers))
    bad, _ = gather(
        np.arange(len(buffers), dtype=np.int64), addresses, sizes, out[:0], group, rel, nbytes,
        out, dst,
    )
    if bad >= 0:
        raise IndexError(
            f"range read {int(group[bad])} returned {len(buffers[int(group[bad])])} bytes, fewer "
            f"than the {int(rel[bad] + nbytes[bad])} asked"
        )


def place_runs(flat: np.ndarray, length: np.ndarray, out: np.ndarray, out_pos: np.ndarray) -> None:
    """Copies the consecutive runs of `flat` (of `length[j]` items each, in order) to
    `out[out_pos[j] : out_pos[j] + length[j]]`, converting to `out.dtype` (`flat` as one source)."""
    counts = np.ascontiguousarray(length, np.int64)
    k = counts.shape[0]
    gather(
        np.zeros(1, np.int64), np.array([flat.ctypes.data], np.int64), np.array([flat.size], np.int64),
        flat[:0], np.zeros(k, np.int64), np.cumsum(counts) - counts, counts, out,
        np.ascontiguousarray(out_pos, np.int64),
    )


@numba.njit(nogil=True, cache=True)
def sequence_starts(
    pointer_addr, sequence_count, itemsize, dataset, sequence, offset, out
):  # pragma: no cover - compiled
    """`out[j]` = the `.bin` token offset of token `offset[j]` of sequence `sequence[j]` of dataset
    `dataset[j]`: its byte pointer (`sequence_count[d]` int64 at `pointer_addr[d]`) over
    `itemsize[d]`, plus the offset. Returns the first position naming an unknown dataset, a
    missing sequence (or a dataset whose pointers are not given: count -1) or a negative offset,
    else -1."""
    pointer_like = np.zeros(0, np.int64)
    for j in range(dataset.shape[0]):
        d = dataset[j]
        if d < 0 or d >= sequence_count.shape[0]:
            return j
        s = sequence[j]
        if s < 0 or s >= sequence_count[d] or offset[j] < 0:
            return j
        ptrs = numba.carray(_typed_pointer(pointer_addr[d], pointer_like), (sequence_count[d],))
        out[j] = ptrs[s] // itemsize[d] + offset[j]
    return -1


def _address(buf: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value or 0

"""Compiled span gathers for the storage hot path (Numba, arrays in / arrays out).

`gather_spans` copies k byte spans of a flat source buffer into one preallocated output; it is what
`IndexedDataset.read_token_spans` runs over the memory-mapped `.bin`. Each span is one libc
`memcpy` called from a Numba loop: measured here, that is 3-10x faster than Numba slice assignment
and than a Python loop of numpy slice copies (which pays ~1 us per span).

The kernel works on uint8 views so it compiles once per process (not once per token dtype). It
calls a ctypes function pointer and so cannot use Numba's on-disk cache (~0.3 s compile on first
use in a process).
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numba
import numpy as np


def _load_memcpy() -> ctypes._CFuncPtr | None:
    for name in (None, ctypes.util.find_library("c")):
        try:
            fn = ctypes.CDLL(name).memcpy
        except (OSError, AttributeError, TypeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        fn.restype = ctypes.c_void_p
        return fn
    return None


_memcpy = _load_memcpy()

if _memcpy is not None:

    @numba.njit(nogil=True)
    def _scatter_kernel(
        addrs: np.ndarray,
        group: np.ndarray,
        rel: np.ndarray,
        nbytes: np.ndarray,
        dst: np.ndarray,
        out: np.ndarray,
    ) -> None:
        out_ptr = out.ctypes.data
        for j in range(group.shape[0]):
            if nbytes[j] > 0:
                _memcpy(out_ptr + dst[j], addrs[group[j]] + rel[j], nbytes[j])

    @numba.njit(nogil=True)
    def _gather_kernel(
        src: np.ndarray, starts: np.ndarray, nbytes: np.ndarray, out: np.ndarray
    ) -> None:
        src_ptr = src.ctypes.data
        out_ptr = out.ctypes.data
        pos = 0
        for j in range(starts.shape[0]):
            n = nbytes[j]
            if n > 0:
                _memcpy(out_ptr + pos, src_ptr + starts[j], n)
            pos += n

else:  # pragma: no cover - platforms without a loadable libc

    @numba.njit(nogil=True)
    def _gather_kernel(
        src: np.ndarray, starts: np.ndarray, nbytes: np.ndarray, out: np.ndarray
    ) -> None:
        pos = 0
        for j in range(starts.shape[0]):
            s = starts[j]
            for t in range(nbytes[j]):
                out[pos + t] = src[s + t]
            pos += nbytes[j]


def gather_spans(src: np.ndarray, starts: np.ndarray, counts: np.ndarray, out: np.ndarray) -> None:
    """Copies `src[starts[j] : starts[j] + counts[j]]` for every j, concatenated, into `out`.

    Bounds are the caller's responsibility: the kernel does not check them.

    Args:
        src: 1-D C-contiguous source array (e.g. a view over an mmap of the `.bin`).
        starts: int64[k] item offsets into `src`.
        counts: int64[k] item counts.
        out: 1-D C-contiguous output of `src.dtype` with `counts.sum()` items.
    """
    k = starts.shape[0]
    if k == 0 or out.shape[0] == 0:
        return
    itemsize = src.dtype.itemsize
    if k == 1:
        s, c = int(starts[0]), int(counts[0])
        out[:c] = src[s : s + c]
        return
    _gather_kernel(src.view(np.uint8), starts * itemsize, counts * itemsize, out.view(np.uint8))


def scatter_from_buffers(
    buffers: list[bytes],
    group: np.ndarray,
    rel: np.ndarray,
    nbytes: np.ndarray,
    dst: np.ndarray,
    out: np.ndarray,
) -> None:
    """Copies `buffers[group[j]][rel[j] : rel[j] + nbytes[j]]` to `out[dst[j] : dst[j] + nbytes[j]]`.

    Used by the TensorStore path to place coalesced range reads. Bounds are the caller's
    responsibility.

    Args:
        buffers: one bytes object per coalesced read.
        group: int64[k] buffer index of each span.
        rel: int64[k] byte offset of each span inside its buffer.
        nbytes: int64[k] span sizes in bytes.
        dst: int64[k] byte offsets in `out`.
        out: 1-D uint8 C-contiguous destination.
    """
    if _memcpy is None:  # pragma: no cover - platforms without a loadable libc
        views = [np.frombuffer(b, dtype=np.uint8) for b in buffers]
        for g, r, n, d in zip(group.tolist(), rel.tolist(), nbytes.tolist(), dst.tolist()):
            out[d : d + n] = views[g][r : r + n]
        return
    addrs = np.fromiter((_address(b) for b in buffers), dtype=np.int64, count=len(buffers))
    _scatter_kernel(addrs, group, rel, nbytes, dst, out)


def _address(buf: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value or 0

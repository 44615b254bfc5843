"""Content digests of `.bin` files, so a dataset's identity covers its tokens, not only its index.

The `.idx` says how many tokens each sequence has; it says nothing about which tokens. Two `.bin`
files of the same size (the same corpus re-tokenized with a tokenizer that keeps lengths, a
lower-cased copy under a byte tokenizer, bit rot, a file copied over another) pair with the same
`.idx`. `IndexedDataset.fingerprint` therefore hashes the `.bin` too, with the digest defined here.

Digest (docs/format.md, "Fingerprint"): the `.bin` is cut into chunks of `CHUNK_BYTES` (the last one
shorter); each chunk is hashed with SHA-256, and the digest is SHA-256 of the size (8 bytes,
little-endian) followed by the chunk digests in order. The chunks are independent, so local files
are hashed by several threads at once (hashlib and `os.pread` release the GIL) and object-store
objects chunk by chunk as their ranges arrive; both give the same value for the same bytes, so a
dataset keeps its identity when it moves between a disk and a bucket.

Cost: one full read of the `.bin` per file version (about 1.7 GB/s per core with SHA-NI). It is paid
once: `identity_memo` remembers the result by file version (local: device, inode, size, mtime,
ctime; buckets: object generations), and later opens cost a `stat` or the two requests they already
make. Measured figures are in BENCHMARKS.md ("Dataset identity").
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import os
import threading
from collections.abc import Callable
from typing import Any

CHUNK_BYTES = 16 << 20
_IN_FLIGHT = 8  # chunks read ahead of the hashing, per file

_pool_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="jaxblend-digest"
            )
        return _pool


def chunk_ranges(size: int) -> list[tuple[int, int]]:
    """The `[start, stop)` byte ranges of the chunks of a `size`-byte file."""
    return [(lo, min(lo + CHUNK_BYTES, size)) for lo in range(0, size, CHUNK_BYTES)]


def combine(size: int, chunk_digests: list[bytes]) -> str:
    """The file digest (hex) from its size and its chunks' SHA-256 digests, in order."""
    top = hashlib.sha256(size.to_bytes(8, "little"))
    for digest in chunk_digests:
        top.update(digest)
    return top.hexdigest()


def _hash_local_chunk(fd: int, start: int, stop: int, name: str) -> bytes:
    data = os.pread(fd, stop - start, start)
    if len(data) != stop - start:
        raise OSError(f"{name}: short read at byte {start + len(data)} (the file shrank while hashed)")
    return hashlib.sha256(data).digest()


def local_file_digest(path: str, size: int, name: str) -> str:
    """Digest of the first `size` bytes of a local file, hashed by the shared thread pool.

    Raises:
      OSError: if the file cannot be read or is shorter than `size` (the message names `name`).
    """
    ranges = chunk_ranges(size)
    fd = os.open(path, os.O_RDONLY)
    try:
        if len(ranges) <= 1:
            digests = [_hash_local_chunk(fd, lo, hi, name) for lo, hi in ranges]
        else:
            pool = _executor()
            digests = list(pool.map(lambda r: _hash_local_chunk(fd, r[0], r[1], name), ranges))
    finally:
        os.close(fd)
    return combine(size, digests)


def streamed_digest(
    size: int,
    start_read: Callable[[int, int], Any],
    finish_read: Callable[[Any], bytes],
) -> str:
    """Digest of an object read chunk by chunk.

    At most `_IN_FLIGHT` chunks are requested ahead of the one being hashed, which bounds memory
    (`_IN_FLIGHT` x `CHUNK_BYTES`) and keeps the connection busy while hashing.

    Args:
      size: object size in bytes.
      start_read: starts the read of bytes `[start, stop)` and returns a handle.
      finish_read: waits for a handle and returns its bytes (raising a named error on failure).
    """
    ranges = chunk_ranges(size)
    pending: collections.deque = collections.deque()
    digests: list[bytes] = []
    for i in range(len(ranges)):
        while len(pending) < _IN_FLIGHT and i + len(pending) < len(ranges):
            pending.append(start_read(*ranges[i + len(pending)]))
        digests.append(hashlib.sha256(finish_read(pending.popleft())).digest())
    return combine(size, digests)

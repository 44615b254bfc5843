"""Content digests of `.bin` files, so a dataset's identity covers its tokens, not only its index.

The `.idx` says how many tokens each sequence has; it says nothing about which tokens. Two `.bin`
files of the same size (the same corpus re-tokenized with a tokenizer that keeps lengths, a
lower-cased copy under a byte tokenizer, bit rot, a file copied over another) pair with the same
`.idx`. `IndexedDataset.fingerprint` therefore covers the `.bin` too, with the digest defined here.

Digest (docs/format.md, "Fingerprint"): the MD5 of the `.bin` bytes. MD5 is what object stores
already keep for an object (GCS `md5Hash`, the ETag of a single-part S3 upload), so for most bucket
objects the digest is read from the store's metadata (`store_checksums`) instead of computed, and
a computed digest of a disk copy equals the reported digest of a bucket copy: a dataset keeps its
identity when it moves between a disk and a bucket. (MD5 is used as a checksum of bytes a trusted
party wrote, not against an adversary who crafts collisions.)

Computing it is one sequential pass: MD5 cannot be split into independent chunks. Reads run ahead
of the hashing (`_IN_FLIGHT` chunks of `CHUNK_BYTES`, in threads for local files, as concurrent
range requests for objects), so the pass runs at the speed of one core's MD5 when the bytes arrive
fast enough. It is paid once per file version: `memo` remembers the result (local:
device, inode, size, mtime, ctime; buckets: object generations). Measured figures:
benchmarks/dataset_identity.py.
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
_IN_FLIGHT = 4  # chunks read ahead of the hashing, per file

_pool_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=_IN_FLIGHT, thread_name_prefix="jaxblend-digest"
            )
        return _pool


def _read_local_chunk(fd: int, start: int, stop: int, name: str) -> bytes:
    data = os.pread(fd, stop - start, start)
    if len(data) != stop - start:
        raise OSError(f"{name}: short read at byte {start + len(data)} (the file shrank while hashed)")
    return data


def local_file_digest(path: str, size: int, name: str) -> str:
    """MD5 (hex) of the first `size` bytes of a local file, read ahead by a few threads.

    Raises:
      OSError: if the file cannot be read or is shorter than `size` (the message names `name`).
    """
    fd = os.open(path, os.O_RDONLY)
    pool = _executor()
    started: list[concurrent.futures.Future] = []

    def start(lo: int, hi: int) -> concurrent.futures.Future:
        started[:] = [f for f in started if not f.done()]  # done: no longer touching `fd`
        started.append(pool.submit(_read_local_chunk, fd, lo, hi, name))
        return started[-1]

    try:
        return streamed_digest(size, start, lambda future: future.result())
    finally:
        concurrent.futures.wait(started)  # no read may outlive the descriptor
        os.close(fd)


def streamed_digest(
    size: int,
    start_read: Callable[[int, int], Any],
    finish_read: Callable[[Any], bytes],
) -> str:
    """MD5 (hex) of an object read chunk by chunk, in order.

    At most `_IN_FLIGHT` chunks are requested ahead of the one being hashed, which bounds memory
    (`_IN_FLIGHT` x `CHUNK_BYTES`) and keeps the reads busy while hashing.

    Args:
      size: object size in bytes.
      start_read: starts the read of bytes `[start, stop)` and returns a handle.
      finish_read: waits for a handle and returns its bytes (raising a named error on failure).
    """
    ranges = [(lo, min(lo + CHUNK_BYTES, size)) for lo in range(0, size, CHUNK_BYTES)]
    pending: collections.deque = collections.deque()
    digest = hashlib.md5(usedforsecurity=False)
    try:
        for i in range(len(ranges)):
            while len(pending) < _IN_FLIGHT and i + len(pending) < len(ranges):
                pending.append(start_read(*ranges[i + len(pending)]))
            digest.update(finish_read(pending.popleft()))
    finally:
        for handle in pending:  # a failed chunk: let the reads already started finish unused
            cancel = getattr(handle, "cancel", None)
            if cancel is not None:
                cancel()
    return digest.hexdigest()

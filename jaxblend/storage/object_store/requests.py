"""TensorStore object I/O for the reader: bounded waits, clear errors, coalesced byte-range reads.

Everything here talks to a `ts.KvStore` (gs://, s3://, memory://, file://) and turns TensorStore's
status errors into one-line messages that name the object: `IndexFormatError` when a file is
missing, short or inconsistent; `ObjectStoreError` when the server failed (after TensorStore's
retries) or did not answer within the timeout.

`RangeRead` is the batch hot path: the spans of one call are sorted, coalesced (ranges closer than
a gap merge into one request) and issued on a caller's `ts.Batch`, so the spans of many files and
many calls can be in flight together; `finish` waits for them and copies the bytes into place.
"""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np
import tensorstore as ts

from jaxblend.storage import _gather
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store.errors import ObjectStoreError, bucket_of, describe

_SIZE_IN_ERROR = re.compile(r"(?:value of size|total size|ActualObjectSize>)\s*(\d+)")


def wait(
    future: Any,
    name: str,
    what: str,
    timeout: float,
    s3_endpoint: str | None = None,
    writing: bool = False,
) -> Any:
    """`future.result()` bounded by `timeout` seconds, failures named after `name`.

    A failed request becomes one line (`errors.describe`): denied access names how credentials
    are found, an unreachable server names it and the flag to change, a
    missing bucket names it (`s3_endpoint`: the server of an s3:// `name`, when known).

    Raises:
      ObjectStoreError: on a timeout or a failed request (other than OUT_OF_RANGE).
      ValueError: TensorStore's OUT_OF_RANGE error, re-raised for callers that probe sizes.
    """
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        raise ObjectStoreError(
            f"{name}: no answer within {timeout:g} s while {what}; the server stopped answering "
            "(check it, or raise --storage_timeout)"
        ) from None
    except ValueError as e:
        text = str(e)
        if text.startswith("OUT_OF_RANGE"):
            raise
        raise ObjectStoreError(describe(text, name, what, s3_endpoint, writing)) from None


def read(kv: ts.KvStore, key: str, byte_range: slice | None = None, batch: Any = None) -> Any:
    """Starts one read (whole object or a byte range); returns the future."""
    return kv.read(key, byte_range=byte_range, batch=batch)


def read_existing(
    kv: ts.KvStore, key: str, name: str, what: str, timeout: float, byte_range: slice | None = None
) -> Any:
    """Reads an object that must exist; returns the `ReadResult`.

    Raises:
      IndexFormatError: if the object does not exist or is shorter than `byte_range`.
      ObjectStoreError: on a server failure or timeout.
    """
    try:
        res = wait(read(kv, key, byte_range), name, f"reading the {what}", timeout)
    except ValueError as e:
        size = size_from_error(e)
        raise IndexFormatError(
            f"{name}: {what} is {size if size is not None else 'shorter than'} bytes, too short "
            f"for bytes [{byte_range.start}, {byte_range.stop}); the file is truncated"
        ) from None
    if res.state != "value":
        raise IndexFormatError(missing_message(kv, key, name, what, timeout))
    return res


def missing_message(kv: ts.KvStore, key: str, name: str, what: str, timeout: float) -> str:
    """Says an object is missing, and whether its whole bucket is (when the server tells)."""
    try:
        wait(kv.list(range=ts.KvStore.KeyRange(key, key + "\x00")), name, "listing", timeout)
    except (ObjectStoreError, ValueError) as e:
        if "NoSuchBucket" in str(e) or "bucket" in str(e).lower():
            return (
                f"{name}: {what} does not exist: the bucket {bucket_of(name)} does not exist "
                "(create it, or check the URL)"
            )
    return f"{name}: {what} does not exist (check the path, the bucket name and the credentials)"


def object_size(kv: ts.KvStore, key: str, expected: int, name: str, timeout: float) -> tuple[int, bytes]:
    """Checks an object is exactly `expected` bytes; returns (size, generation).

    Two 1-byte probes run concurrently (as separate requests: one batch would merge them into a
    single range that no server can satisfy): the last expected byte must exist, the next must not.

    Raises:
      IndexFormatError: with the actual size when known, if the size differs or it is missing.
    """
    last = read(kv, key, slice(max(expected - 1, 0), expected))
    beyond = read(kv, key, slice(expected, expected + 1))
    try:
        res = wait(last, name, "checking the data file size", timeout)
    except ValueError as e:
        actual = size_from_error(e)
        actual = f"fewer than {expected}" if actual is None else actual
    else:
        if res.state != "value":
            raise IndexFormatError(missing_message(kv, key, name, "data file", timeout))
        try:
            wait(beyond, name, "checking the data file size", timeout)
        except ValueError:
            return expected, bytes(res.stamp.generation)
        try:  # how much more: a read far beyond the end makes some servers say
            wait(read(kv, key, slice(1 << 62, (1 << 62) + 1)), name, "checking the size", timeout)
            actual = None
        except ValueError as e:
            actual = size_from_error(e)
        actual = f"more than {expected}" if actual is None else actual
    raise IndexFormatError(
        f"{name}: data file is {actual} bytes but its index implies {expected} bytes; the pair is "
        "truncated or mismatched"
    )


def size_from_error(e: Exception) -> int | None:
    """The object size some servers report in a range error, if any."""
    m = _SIZE_IN_ERROR.search(str(e))
    return int(m.group(1)) if m else None


class RangeRead:
    """Byte spans of one object, coalesced and issued on a batch; `finish` places them.

    `requests` and `bytes_requested` count what was issued; after `finish`, `generations` holds
    the object generation each request saw (callers that know the expected version check it).

    Args:
      kv: the object's kvstore.
      key: the object key.
      name: display name for messages.
      starts: int64[k] byte offsets of the spans in the object.
      nbytes: int64[k] span sizes.
      dst: int64[k] byte offsets of the spans in the destination.
      gap: spans closer than this many bytes are read as one request.
      batch: a `ts.Batch` the requests join (submitted when the caller's `with` block ends).
    """

    def __init__(
        self,
        kv: ts.KvStore,
        key: str,
        name: str,
        starts: np.ndarray,
        nbytes: np.ndarray,
        dst: np.ndarray,
        gap: int,
        batch: Any,
    ):
        self.name = name
        keep = np.flatnonzero(nbytes > 0)
        order = keep[np.argsort(starts[keep], kind="stable")]
        b0 = starts[order]
        b1 = b0 + nbytes[order]
        self.requests = 0
        self.bytes_requested = 0
        self.generations: list[bytes] = []  # each request's object generation, after `finish`
        self._futures: list[Any] = []
        self._answered: list[float] | None = None  # perf_counter() of each answer, when timed
        self._lo = self._hi = self._group = self._rel = self._nbytes = self._dst = order[:0]
        if order.size == 0:
            return
        reach = np.maximum.accumulate(b1)
        new_group = np.empty(order.shape[0], dtype=bool)
        new_group[0] = True
        new_group[1:] = b0[1:] > reach[:-1] + gap
        heads = np.flatnonzero(new_group)
        self._lo = b0[heads]
        self._hi = np.maximum.reduceat(b1, heads)
        self._group = np.cumsum(new_group) - 1
        self._rel = b0 - self._lo[self._group]
        self._nbytes = b1 - b0
        self._dst = dst[order]
        self._futures = [
            kv.read(key, byte_range=slice(lo, hi), batch=batch)
            for lo, hi in zip(self._lo.tolist(), self._hi.tolist())
        ]
        self.requests = len(self._futures)
        self.bytes_requested = int((self._hi - self._lo).sum())

    def time_answers(self) -> None:
        """Notes when each request is answered (for `latencies`); call before `finish`."""
        self._answered = [0.0] * len(self._futures)
        for i, fut in enumerate(self._futures):
            fut.add_done_callback(lambda _, i=i, slots=self._answered: _note(slots, i))

    def latencies(self, submitted: float) -> list[float]:
        """Seconds from `submitted` (a `time.perf_counter()`) to each answer (after `finish`)."""
        if self._answered is None:
            return []
        return [max(0.0, t - submitted) for t in self._answered if t]

    def unanswered(self) -> list[tuple[int, int]]:
        """The byte ranges `[start, stop)` of the requests not answered yet."""
        return [
            (lo, hi) for fut, lo, hi in zip(self._futures, self._lo.tolist(), self._hi.tolist())
            if not fut.done()
        ]

    def finish(self, out: np.ndarray, timeout: float) -> None:
        """Waits for the reads (at most `timeout` s) and copies the spans into `out` (uint8).

        Raises:
          IndexFormatError: if the object vanished or is shorter than a span.
          ObjectStoreError: on a server failure or timeout.
        """
        buffers = []
        for fut, lo, hi in zip(self._futures, self._lo.tolist(), self._hi.tolist()):
            what = f"reading bytes [{lo}, {hi})"
            try:
                res = wait(fut, self.name, what, timeout)
            except ValueError:
                res = None
            if res is None or res.state != "value" or len(res.value) != hi - lo:
                raise IndexFormatError(
                    f"{self.name}: {what} did not return them; the file changed or vanished "
                    "since it was opened"
                )
            buffers.append(res.value)
            self.generations.append(bytes(res.stamp.generation))
            if self._answered is not None:  # answered by now, whenever its callback runs
                _note(self._answered, len(buffers) - 1)
        _gather.place_buffers(buffers, self._group, self._rel, self._nbytes, self._dst, out)


def _note(slots: list[float], i: int) -> None:
    """Notes when request i was answered (first sight: its callback, or `finish` getting it)."""
    if not slots[i]:
        slots[i] = time.perf_counter()

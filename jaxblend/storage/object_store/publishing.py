"""Publishing to an object store: payload first, commit marker last; waiting for a publication.

Object stores have no rename, so a set of objects is published atomically by writing a *commit
marker* after everything it vouches for: a reader that finds the marker finds the payload
complete; a publisher that dies half-way leaves no marker (or the previous one), and the next
publisher overwrites its leftovers. Every publication of the package follows this one protocol:

* an index-map entry (`jaxblend.map_store.bucket`): arrays and manifest, then `COMMITTED`;
* a publication record (`jaxblend.map_store.publication`): the row-table entry (itself published
  this way), then the record;
* preprocessing outputs (`jaxblend.preprocess.bucket_output`): every `.bin`, then every `.idx`,
  then the cleaning report, then the run record.

`publish` runs it: delete the `retract` keys (in order: a stale marker first, so nothing vouches
for a half-replaced payload), write the payload stage by stage (the objects of one stage in
flight together; a stage starts when the previous one is written), then the marker. Readers wait
for a publication with `wait_for_publication`: poll until it appears, or fail after the deadline
with one line naming the URL.
"""

from __future__ import annotations

import collections
import os
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from jaxblend.storage.object_store.directory import ObjectDirectory

T = TypeVar("T")

Payload = bytes | str | os.PathLike
"""An object's content: bytes, or the path of a local file holding them."""


def publish(
    directory: ObjectDirectory,
    stages: Sequence[Sequence[tuple[str, Payload]]],
    marker: tuple[str, bytes],
    retract: Sequence[str] = (),
    what: str = "publishing",
    in_flight: int | None = None,
) -> dict[str, bytes]:
    """Publishes `stages` of objects under `directory`, the commit `marker` (key, content) last.

    Args:
      directory: where the objects go.
      stages: lists of (key, content), written one list after the other.
      marker: the commit marker's key and content, written after every stage.
      retract: keys deleted first, in this order (a stale marker, objects that must not be seen
        beside the new payload).
      what: what is published, for messages ("uploading the index cache").
      in_flight: most objects of a stage being written at once (None: all); each is held in
        memory while it is written, so large files are published one (or a few) at a time.

    Returns:
      key -> generation written, for every payload object and the marker.

    Raises:
      ObjectStoreError: the store failed or timed out (the marker is then not written).
      OSError: a local payload file cannot be read.
    """
    for key in retract:
        directory.write(key, None, f"{what}: removing the stale {key}")
    written: dict[str, bytes] = {}
    for stage in stages:
        pending: collections.deque = collections.deque()
        for key, data in stage:
            pending.append((key, directory.start_write(key, _content(data))))
            if in_flight is not None and len(pending) >= in_flight:
                done, future = pending.popleft()
                written[done] = bytes(directory.wait(future, done, what, writing=True).generation)
        for key, future in pending:
            written[key] = bytes(directory.wait(future, key, what, writing=True).generation)
    key, data = marker
    written[key] = directory.write(key, data, f"{what}: writing the commit point")
    return written


def _content(data: Payload) -> bytes:
    return data if isinstance(data, bytes) else pathlib.Path(data).read_bytes()


def wait_for_publication(
    poll: Callable[[], T | None],
    url: str,
    wait_seconds: float,
    poll_seconds: float,
    advice: str,
    setting: str = "--data_cache_wait",
) -> T:
    """Calls `poll` until it returns something other than None, at most `wait_seconds`.

    Args:
      poll: looks for the publication once (e.g. reads its marker); None while absent.
      url: what is waited for, named in the timeout message.
      wait_seconds: the deadline.
      poll_seconds: pause between looks.
      advice: what to check or do after a timeout.
      setting: the flag that sets `wait_seconds`.

    Returns:
      What `poll` found.

    Raises:
      TimeoutError: `<url>: not published within <wait_seconds> s (<setting>); <advice>`.
    """
    deadline = time.monotonic() + wait_seconds
    while (found := poll()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{url}: not published within {wait_seconds:g} s ({setting}); {advice}"
            )
        time.sleep(poll_seconds)
    return found

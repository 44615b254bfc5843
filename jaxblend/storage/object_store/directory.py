"""`ObjectDirectory`: the objects under one store URL, read and written in whole or by range.

Every bucket directory of the package (the map store, preprocessing outputs and inputs, a row
table's directory, a preprocessing record's directory) is one of these: a kvstore opened with the
run's `ObjectStoreOptions` (`location.open_store`), every request bounded by
`ObjectStoreOptions.request_timeout` and every failure one `ObjectStoreError` line naming the
object's URL and the fix (`errors.describe`).
"""

from __future__ import annotations

from typing import Any

import tensorstore as ts

from jaxblend.access import ObjectStoreOptions
from jaxblend.storage.object_store import requests
from jaxblend.storage.object_store.location import open_store, spec_url


class ObjectDirectory:
    """The objects under directory `url` (`gs://b/dir/`, `s3://...`, `memory://...`).

    Args:
      url: the directory's URL (a trailing "/" is added when missing) or a kvstore spec whose
        path is the directory.
      options: how the store is reached.
      display: the directory's name in messages (default: `url`).
    """

    def __init__(
        self, url: str | dict[str, Any], options: ObjectStoreOptions, display: str | None = None
    ) -> None:
        if isinstance(url, str):
            url = url.rstrip("/") + "/"
        elif display is None:
            display = spec_url(url)
        self.url = display if display is not None else url
        self.options = options
        self.kvstore = open_store(url, options)

    def __repr__(self) -> str:
        return f"ObjectDirectory({self.url!r})"

    def url_of(self, key: str) -> str:
        """The URL of object `key`."""
        return self.url + key

    def wait(self, future: Any, key: str, what: str, writing: bool = False) -> Any:
        """The result of a request about object `key` (see `requests.wait`)."""
        return requests.wait(
            future, self.url_of(key), what, self.options.request_timeout, self.options.s3_endpoint,
            writing,
        )

    def read(self, key: str, what: str = "reading it") -> bytes | None:
        """The whole object `key`, or None when it does not exist.

        Raises:
          ObjectStoreError: the store failed or timed out.
        """
        res = self.wait(self.kvstore.read(key), key, what)
        return bytes(res.value) if res.state == "value" else None

    def read_result(
        self,
        key: str,
        byte_range: slice | None = None,
        what: str = "reading it",
        if_not_equal: bytes | None = None,
    ) -> ts.KvStore.ReadResult:
        """TensorStore's `ReadResult` of (a byte range of) object `key`; with `if_not_equal`, the
        state is "unspecified" when the object is still at that generation (nothing transferred).

        Raises:
          ObjectStoreError: the store failed or timed out.
          ValueError: OUT_OF_RANGE, the object ends before `byte_range`.
        """
        future = self.kvstore.read(key, byte_range=byte_range, if_not_equal=if_not_equal)
        return self.wait(future, key, what)

    def start_read(self, key: str, byte_range: slice | None = None, batch: Any = None) -> Any:
        """Issues a read of (a byte range of) object `key`; the future (finish it with `wait`)."""
        return requests.read(self.kvstore, key, byte_range, batch)

    def exists(self, key: str, what: str = "checking it exists") -> bool:
        """Whether object `key` exists (an empty read; no data transferred).

        Raises:
          ObjectStoreError: the store failed or timed out.
        """
        try:
            return self.read_result(key, slice(0, 0), what).state == "value"
        except ValueError:  # OUT_OF_RANGE: an empty object exists
            return True

    def write(self, key: str, data: bytes | None, what: str = "writing it") -> bytes:
        """Writes object `key` in one request (atomic on GCS and S3), or deletes it when `data` is
        None; the generation written.

        Raises:
          ObjectStoreError: the store failed or timed out.
        """
        return bytes(self.wait(self.kvstore.write(key, data), key, what, writing=True).generation)

    def start_write(self, key: str, data: bytes | None) -> Any:
        """Issues a write (None: delete) of object `key`; the future (finish it with `wait`)."""
        return self.kvstore.write(key, data)

"""The object-store layer: every gs://, s3://, memory:// and file:// request of the package.

* `location`: where data lives (`resolve`: local path, URL or kvstore spec -> `Location`) and how
  a store is opened (`open_store`: with the run's `ObjectStoreOptions`; `open_kvstore`,
  `shared_context`, `context_for`).
* `directory`: `ObjectDirectory`, the objects under one URL: read (whole, by range, conditional),
  write, delete.
* `requests`: bounded waits (`wait`), reads of objects that must exist (`read_existing`,
  `object_size`) and coalesced byte-range reads (`RangeRead`, the batch hot path).
* `publishing`: the one publish protocol (`publish`: payload, then the commit marker last) and
  `wait_for_publication`.
* `errors`: `ObjectStoreError` and the one-line messages of failed requests (`describe`).
* `sdk_logging`: the AWS SDK's credential-chain chatter, hidden unless `show_sdk_logging(True)`
  (command-line tools: `--verbose`).

How stores are reached (endpoint, region, concurrency, retries, timeouts) is
`jaxblend.access.ObjectStoreOptions`, part of the `DataAccess` passed to everything that opens
data. Names resolve on first use: `from jaxblend.storage.object_store import ObjectStoreError`
does not load TensorStore.
"""

from __future__ import annotations

from jaxblend import _lazy

_NAMES = {
    "ObjectStoreError": ".errors",
    "describe": ".errors",
    "ObjectDirectory": ".directory",
    "RangeRead": ".requests",
    "publish": ".publishing",
    "wait_for_publication": ".publishing",
    "show_sdk_logging": ".sdk_logging",
}

__all__ = [
    "ObjectDirectory",
    "ObjectStoreError",
    "RangeRead",
    "describe",
    "publish",
    "show_sdk_logging",
    "wait_for_publication",
]


__getattr__, __dir__ = _lazy.exports(__name__, _NAMES)

"""Failures of object-store requests (gs://, s3://): one error type naming the URL.

How stores are reached (endpoint, region, concurrency, retries, timeouts) is
`jaxblend.access.ObjectStoreOptions`, part of the `DataAccess` passed to everything that opens data.
"""

from __future__ import annotations


class ObjectStoreError(OSError):
    """A request to an object store failed, timed out, or named something that is not there."""

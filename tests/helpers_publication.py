"""Checks of a host that starts from a publication record (tests/sources): it opens no dataset
and downloads no map entry, and reads the same batches as the path that opens everything."""

from __future__ import annotations

import numpy as np

from jaxblend.map_store import bucket
from jaxblend.storage.reader import IndexedDataset


def forbid_opening(monkeypatch) -> None:
    """Makes opening a dataset (its `.idx`) or downloading a whole map entry fail the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(
            "a host starting from the publication opened a dataset or downloaded a map entry"
        )

    monkeypatch.setattr(IndexedDataset, "__init__", refuse)
    monkeypatch.setattr(bucket.Bucket, "fetch", refuse)


def assert_same_batch(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """The two batches have the same keys, dtypes and bytes."""
    assert a.keys() == b.keys()
    for name, value in a.items():
        assert value.dtype == b[name].dtype and value.tobytes() == b[name].tobytes(), name

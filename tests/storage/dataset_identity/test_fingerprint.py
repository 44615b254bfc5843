"""`dataset_fingerprint`: the one entry point of dataset identity (prefix + access -> fingerprint).

The value keys index-map caches and resume states, so it is pinned here for a fixed dataset: a
change to how it is computed fails this test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxblend.access import DataAccess
from jaxblend.storage import IndexedDataset, IndexedDatasetBuilder
from jaxblend.storage.dataset_identity import dataset_fingerprint

PINNED = "6c372f454e54cb4290d20537ed438b58"  # computed by the code before the identity move


def _fixed_dataset(directory: Path) -> str:
    prefix = str(directory / "fixed")
    builder = IndexedDatasetBuilder(prefix, dtype=np.uint16)
    for doc in range(5):
        builder.add_document(np.arange(doc * 7, doc * 7 + 3 + doc, dtype=np.uint16), [3 + doc])
    builder.finalize()
    return prefix


def test_the_fingerprint_of_a_fixed_dataset_is_pinned(tmp_path) -> None:
    prefix = _fixed_dataset(tmp_path)
    assert dataset_fingerprint(prefix) == PINNED
    assert dataset_fingerprint(prefix) == PINNED  # the second time from the identity memo


def test_disk_and_bucket_copies_have_the_same_fingerprint(object_store, tmp_path) -> None:
    prefix = _fixed_dataset(tmp_path)
    url = object_store.upload(prefix, f"identity/{object_store.scheme}-fixed")
    access = DataAccess.from_env()
    assert dataset_fingerprint(url, access) == PINNED
    assert IndexedDataset(url, access=access).fingerprint == PINNED
    assert Path(prefix + ".bin").exists()

"""The one entry point of dataset identity: a prefix and its access -> the content fingerprint.

It opens the dataset with the reader, which validates the pair and identifies it through the
levels of this package (`levels`, `memo`; see the package docstring). It lives apart from the
package's `__init__` because the reader itself imports `levels`.
"""

from __future__ import annotations

from jaxblend.access import DataAccess
from jaxblend.storage.object_store.location import Prefix
from jaxblend.storage.reader import IndexedDataset


def dataset_fingerprint(prefix: Prefix, access: DataAccess | None = None) -> str:
    """The content fingerprint of the dataset at `prefix` (local path, URL or kvstore spec).

    The dataset is opened (its files' versions, sizes and `.idx` header checked) and identified at
    the cheapest level that knows it (see the module docstring).

    Args:
      prefix: the dataset prefix.
      access: how it is reached (default `DataAccess.from_env()`).

    Raises:
      IndexFormatError: a file is missing, malformed, or changed while it was identified.
      ObjectStoreError: the store failed or timed out.
    """

    dataset = IndexedDataset(prefix, access=access)
    try:
        return dataset.fingerprint
    finally:
        dataset.close()

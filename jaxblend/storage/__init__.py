"""Storage layer: Megatron-Core compatible IndexedDataset files (`.bin` + `.idx`).

Writers (`IndexedDatasetBuilder`) produce local files byte-identical to Megatron-Core's; readers
(`IndexedDataset`) read them from a local mmap or any TensorStore kvstore (file, gs://, s3://,
memory://) with batched byte-range reads.
"""

from __future__ import annotations

from jaxblend.storage._location import open_kvstore, shared_context
from jaxblend.storage.builder import IndexedDatasetBuilder
from jaxblend.storage.idx_format import IndexFormatError, token_dtype_for_vocab
from jaxblend.storage.object_store import ObjectStoreError, ObjectStoreOptions
from jaxblend.storage.reader import IndexedDataset, exists

__all__ = [
    "IndexFormatError",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "ObjectStoreError",
    "ObjectStoreOptions",
    "exists",
    "open_kvstore",
    "shared_context",
    "token_dtype_for_vocab",
]

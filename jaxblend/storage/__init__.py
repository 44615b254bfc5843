"""Storage layer: Megatron-Core compatible IndexedDataset files (`.bin` + `.idx`).

Writers (`IndexedDatasetBuilder`) produce local files byte-identical to Megatron-Core's; readers
(`IndexedDataset`: Megatron-Core's `dataset[i]`, `dataset[i:j]`, `get`) read them from a local mmap
or any TensorStore kvstore (file, gs://, s3://, memory://). Every read goes through one path,
`SpanGather`: the token spans of a whole batch, across datasets, in one call.
"""

from __future__ import annotations

from jaxblend.storage._location import open_kvstore, shared_context
from jaxblend.storage.builder import IndexedDatasetBuilder
from jaxblend.storage.idx_format import IndexFormatError, token_dtype_for_vocab
from jaxblend.storage.object_store import ObjectStoreError, ObjectStoreOptions
from jaxblend.storage.reader import IndexedDataset, exists
from jaxblend.storage.span_gather import SpanGather

__all__ = [
    "IndexFormatError",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "ObjectStoreError",
    "ObjectStoreOptions",
    "SpanGather",
    "exists",
    "open_kvstore",
    "shared_context",
    "token_dtype_for_vocab",
]

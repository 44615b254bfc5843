"""Storage layer: Megatron-Core compatible IndexedDataset files (`.bin` + `.idx`).

Writers (`IndexedDatasetBuilder`) produce local files byte-identical to Megatron-Core's; readers
(`IndexedDataset`: Megatron-Core's `dataset[i]`, `dataset[i:j]`, `get`) read them from a local mmap
or any TensorStore kvstore (file, gs://, s3://, memory://). Every read goes through one path,
`TokenReader`: the `.bin` token ranges of a whole batch, across datasets, in one call
(`SequenceSpans` turns sequence positions into those ranges).

Names resolve on first use, so importing one module of the package loads only what it needs.
"""

from __future__ import annotations

from jaxblend import _lazy

_NAMES = {
    "open_kvstore": "jaxblend.storage.object_store.location",
    "shared_context": "jaxblend.storage.object_store.location",
    "IndexedDatasetBuilder": "jaxblend.storage.builder",
    "dataset_fingerprint": "jaxblend.storage.dataset_identity",
    "IndexFormatError": "jaxblend.storage.idx_format",
    "token_dtype_for_vocab": "jaxblend.storage.idx_format",
    "ObjectStoreError": "jaxblend.storage.object_store.errors",
    "IndexedDataset": "jaxblend.storage.reader",
    "exists": "jaxblend.storage.reader",
    "BinDataset": "jaxblend.storage.token_reader",
    "TokenReader": "jaxblend.storage.token_reader",
    "SequenceSpans": "jaxblend.storage.sequence_spans",
}

__all__ = [
    "BinDataset",
    "IndexFormatError",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "ObjectStoreError",
    "SequenceSpans",
    "TokenReader",
    "dataset_fingerprint",
    "exists",
    "open_kvstore",
    "shared_context",
    "token_dtype_for_vocab",
]


# Names resolve on first use (importing `jaxblend.storage.object_store` alone, as `jaxblend.access`
# does, must not load TensorStore).
__getattr__, __dir__ = _lazy.exports(__name__, _NAMES)

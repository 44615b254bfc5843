"""jaxblend: a JAX/TPU-first data pipeline for large-scale LM pretraining."""

from __future__ import annotations

from jaxblend import index
from jaxblend.storage import (
    IndexedDataset,
    IndexedDatasetBuilder,
    IndexFormatError,
    token_dtype_for_vocab,
)

__all__ = [
    "index",
    "IndexFormatError",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "token_dtype_for_vocab",
]

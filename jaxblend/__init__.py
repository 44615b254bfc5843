"""jaxblend: a JAX/TPU-first data pipeline for large-scale LM pretraining.

Public facade (re-exports only). Storage and index maps import eagerly (numpy, numba,
tensorstore); the loading names pull in JAX and Grain, so they are resolved on first use: a
preprocessing worker that only writes `.bin`/`.idx` files never imports JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

from jaxblend import index
from jaxblend.storage import (
    IndexedDataset,
    IndexedDatasetBuilder,
    IndexFormatError,
    token_dtype_for_vocab,
)

_LAZY = {
    "make_loader": "jaxblend.loading",
    "StepLoader": "jaxblend.loading",
    "open_gpt_sources": "jaxblend.sources",
    "GPTSchemaOptions": "jaxblend.sources",
    "GPTSource": "jaxblend.sources",
    "BlendedSource": "jaxblend.sources",
    "MockSource": "jaxblend.sources",
}

__all__ = [
    "BlendedSource",
    "GPTSchemaOptions",
    "GPTSource",
    "IndexFormatError",
    "IndexedDataset",
    "IndexedDatasetBuilder",
    "MockSource",
    "StepLoader",
    "index",
    "make_loader",
    "open_gpt_sources",
    "token_dtype_for_vocab",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxblend' has no attribute {name!r}")

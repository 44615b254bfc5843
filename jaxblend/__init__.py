"""jaxblend: a JAX/TPU-first data pipeline for large-scale LM pretraining.

Public facade (re-exports only). Every name resolves on first use (`__getattr__`), so
`import jaxblend` loads nothing heavy: the pure index layer (`jaxblend.index`) and sampling never
pull in TensorStore, JAX or Grain, and a preprocessing worker that only writes `.bin`/`.idx` files
never imports JAX.
"""

from __future__ import annotations

from jaxblend import _lazy

_LAZY = {
    "index": None,  # the subpackage itself
    "DataAccess": "jaxblend.access",
    "IndexedDataset": "jaxblend.storage",
    "IndexedDatasetBuilder": "jaxblend.storage",
    "IndexFormatError": "jaxblend.storage",
    "token_dtype_for_vocab": "jaxblend.storage",
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
    "DataAccess",
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


__getattr__, __dir__ = _lazy.exports(__name__, _LAZY)

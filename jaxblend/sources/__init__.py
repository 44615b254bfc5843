"""Grain data sources: GPT splits and weighted blends, masked-LM (BERT/T5) and mock samples.

Every source is a Grain `RandomAccessDataSource` returning dicts of numpy arrays (the batch
schema of docs/design.md, 'Batch schema') and also offers `get_batch(sample_ids)` for whole-batch
reads. A GPT split, single dataset or blend, is one class, `GPTSource`, over a `SpanIndex` (split
maps or a published row table); `BlendedSource` is the same class under the public API's name.
`FIMOptions` (`GPTSchemaOptions.fim`) turns its windows into fill-in-the-middle samples
(`jaxblend.sources.fim`, docs/samples.md).
"""

from jaxblend.sources.base import BatchSource, stack_items
from jaxblend.sources.factory import open_gpt_sources, open_validation_sets
from jaxblend.sources.fim import FIMOptions, FIMTransform
from jaxblend.sources.gpt_source import BlendedSource, GPTSource
from jaxblend.sources.masked_base import MaskedSource
from jaxblend.sources.masked_bert import BERTSource
from jaxblend.sources.masked_config import (
    BERTMaskedConfig,
    MaskedConfig,
    MaskedTokenizerInfo,
    T5MaskedConfig,
)
from jaxblend.sources.masked_t5 import T5Source
from jaxblend.sources.mock import MockSource
from jaxblend.sources.row_tables import ArrayRowTables, BucketRowTables, RowTables
from jaxblend.sources.schema import GPTSchemaOptions, windows_to_batch
from jaxblend.sources.sequence import SequenceSource
from jaxblend.sources.span_index import RowTableSpanIndex, SpanIndex, SplitMapsSpanIndex

__all__ = [
    "ArrayRowTables",
    "BERTMaskedConfig",
    "BERTSource",
    "BatchSource",
    "BlendedSource",
    "BucketRowTables",
    "FIMOptions",
    "FIMTransform",
    "GPTSchemaOptions",
    "GPTSource",
    "MaskedConfig",
    "MaskedSource",
    "MaskedTokenizerInfo",
    "MockSource",
    "RowTableSpanIndex",
    "RowTables",
    "SequenceSource",
    "SpanIndex",
    "SplitMapsSpanIndex",
    "T5MaskedConfig",
    "T5Source",
    "open_gpt_sources",
    "open_validation_sets",
    "stack_items",
    "windows_to_batch",
]

"""Index maps: splits, GPT document/sample/shuffle indices, packed rows of whole documents,
weighted blends, BERT/T5 sample indices, and their cache keys.

Pure computation: arrays from sequence lengths, content identities and a configuration, no I/O.
numpy + numba only (no grain, jax or tensorstore). Bit-exact with Megatron-Core 0.16.1. Caching
the maps (local directory, bucket, Megatron's cache) is `jaxblend.map_store`'s job; it offers
Megatron-cached per-dataset maps to a build through `PerDatasetMapsProvider`.
"""

from __future__ import annotations

from jaxblend.index.blend_index import build_blending_indices, build_exhaustive_blending_indices
from jaxblend.index.blend_schedule import BlendSchedule, BlendStage
from jaxblend.index.blend_spec import (
    Blend,
    blend_prefixes,
    normalize,
    parse_blend,
    parse_optional_blend,
    swapped_weights_hint,
    validate_weights,
)
from jaxblend.index.config import DatasetInfo, GPTDataConfig
from jaxblend.index.data_maps import (
    DataMaps,
    DataMapsSpec,
    build_data_maps,
    config_prefixes,
    history_fingerprint,
)
from jaxblend.index.document_index import build_document_index
from jaxblend.index.gpt import GPTIndexMaps, build_gpt_index_maps
from jaxblend.index.masked_maps import MaskedIndexConfig, MaskedSampleIndex, build_masked_index
from jaxblend.index.packed_maps import (
    PackedDatasetMaps,
    PackedSplitMaps,
    build_packed_dataset_maps,
    build_packed_epoch,
)
from jaxblend.index.packing import (
    CutItems,
    PackedItems,
    PackedRows,
    best_fit_pack,
    cut_items,
    pack_items,
)
from jaxblend.index.per_dataset_maps import DatasetMapsRequest, PerDatasetMapsProvider
from jaxblend.index.row_table import RowSpans, build_row_table
from jaxblend.index.sample_index import build_sample_index
from jaxblend.index.shuffle_index import build_shuffle_index
from jaxblend.index.split import parse_split, split_matrix
from jaxblend.index.split_maps import Piece, Spans, SplitMaps

__all__ = [
    "Blend",
    "BlendSchedule",
    "BlendStage",
    "CutItems",
    "DataMaps",
    "DataMapsSpec",
    "DatasetInfo",
    "DatasetMapsRequest",
    "GPTDataConfig",
    "GPTIndexMaps",
    "MaskedIndexConfig",
    "MaskedSampleIndex",
    "PackedDatasetMaps",
    "PackedItems",
    "PackedRows",
    "PackedSplitMaps",
    "PerDatasetMapsProvider",
    "Piece",
    "RowSpans",
    "Spans",
    "SplitMaps",
    "best_fit_pack",
    "blend_prefixes",
    "build_blending_indices",
    "build_data_maps",
    "build_document_index",
    "build_exhaustive_blending_indices",
    "build_gpt_index_maps",
    "build_masked_index",
    "build_packed_dataset_maps",
    "build_packed_epoch",
    "build_row_table",
    "build_sample_index",
    "build_shuffle_index",
    "config_prefixes",
    "cut_items",
    "history_fingerprint",
    "normalize",
    "pack_items",
    "parse_blend",
    "parse_optional_blend",
    "parse_split",
    "split_matrix",
    "swapped_weights_hint",
    "validate_weights",
]

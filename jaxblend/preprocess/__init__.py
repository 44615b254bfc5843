"""Preprocessing: raw text (jsonl / jsonl.gz / jsonl.zst / txt / parquet) to IndexedDataset files.

Public API::

    from jaxblend.preprocess import PreprocessConfig, TokenizerSpec, preprocess
    result = preprocess(PreprocessConfig(input=("data/*.jsonl",), output_prefix="out/corpus",
                                         tokenizer=TokenizerSpec("byte"), append_eod=True))
    result.outputs  # {"text": "out/corpus_text_document"}

``PreprocessConfig(cleaning=CleaningConfig(...))`` adds the cleaning stage before tokenization
(:mod:`jaxblend.preprocess.cleaning`). The CLI is ``python -m jaxblend.tools.preprocess``; the Apache Beam engine is
``jaxblend.preprocess.beam`` (optional ``beam`` extra).
"""

from __future__ import annotations

from jaxblend.preprocess.cleaning import CleaningConfig
from jaxblend.preprocess.pipeline import (
    Engine,
    LocalEngine,
    PreprocessConfig,
    PreprocessResult,
    SettingsMismatchError,
    merge_parts,
    preprocess,
)
from jaxblend.preprocess.readers import InputError, plan_partitions, resolve_inputs
from jaxblend.preprocess.sentences import split_sentences
from jaxblend.preprocess.tokenizers import (
    TOKENIZER_TYPES,
    Tokenizer,
    TokenizerError,
    TokenizerSpec,
    load_tokenizer,
    special_ids,
)
from jaxblend.preprocess.worker import PreprocessDataError, WorkerConfig, process_partition

__all__ = [
    "TOKENIZER_TYPES",
    "CleaningConfig",
    "Engine",
    "InputError",
    "LocalEngine",
    "PreprocessConfig",
    "PreprocessDataError",
    "PreprocessResult",
    "SettingsMismatchError",
    "Tokenizer",
    "TokenizerError",
    "TokenizerSpec",
    "WorkerConfig",
    "load_tokenizer",
    "merge_parts",
    "plan_partitions",
    "preprocess",
    "process_partition",
    "resolve_inputs",
    "special_ids",
    "split_sentences",
]

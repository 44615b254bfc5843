"""Preprocessing: raw text (jsonl / jsonl.gz / jsonl.zst / txt / parquet) to IndexedDataset files.

Public API::

    from jaxblend.preprocess import PreprocessConfig, TokenizerSpec, preprocess
    result = preprocess(PreprocessConfig(input=("data/*.jsonl",), output_prefix="out/corpus",
                                         tokenizer=TokenizerSpec("byte"), append_eod=True))
    result.outputs  # {"text": "out/corpus_text_document"}

``PreprocessConfig(chat=True, json_keys=("messages",), tokenizer=TokenizerSpec("hf", model=dir))``
takes conversations, rendered with the model directory's chat template, and writes each key's
loss mask too (:mod:`jaxblend.preprocess.chat_records`, docs/conversations.md).
``PreprocessConfig(cleaning=CleaningConfig(...))`` adds the cleaning stage before tokenization
(:mod:`jaxblend.preprocess.cleaning`). The CLI is ``python -m jaxblend.tools.preprocess``; the Apache Beam engine is
``jaxblend.preprocess.beam`` (optional ``beam`` extra).
"""

from __future__ import annotations

from jaxblend.preprocess.cleaning import CleaningConfig
from jaxblend.preprocess.config import PreprocessConfig, PreprocessResult
from jaxblend.preprocess.engines import Engine, LocalEngine
from jaxblend.preprocess.manifest import SettingsMismatchError
from jaxblend.preprocess.merge import merge_parts
from jaxblend.preprocess.partitions import InputError, plan_partitions, resolve_inputs
from jaxblend.preprocess.pipeline import preprocess
from jaxblend.preprocess.records import PreprocessDataError
from jaxblend.preprocess.sentences import split_sentences
from jaxblend.preprocess.tokenizer_spec import (
    TOKENIZER_TYPES,
    Tokenizer,
    TokenizerError,
    TokenizerSpec,
)
from jaxblend.preprocess.tokenizers import load_tokenizer
from jaxblend.preprocess.worker import WorkerConfig, process_partition

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
    "split_sentences",
]

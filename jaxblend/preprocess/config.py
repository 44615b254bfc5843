"""A preprocessing run's settings (`PreprocessConfig`) and what it produced (`PreprocessResult`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from jaxblend.access import IdentityStoreOptions, ObjectStoreOptions
from jaxblend.loss_masks import loss_mask_prefix
from jaxblend.preprocess import chat_records, partitions, sentences
from jaxblend.preprocess import records as records_lib
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess.cleaning import report as report_lib
from jaxblend.preprocess.cleaning.config import CleaningConfig
from jaxblend.urls import is_url


@dataclasses.dataclass(frozen=True)
class PreprocessConfig:
    """Settings of one preprocessing run (flag names follow Megatron-LM's ``preprocess_data.py``).

    Attributes:
      input: Input files or globs (``.jsonl``, ``.json``, ``.jsonl.gz``, ``.jsonl.zst``, ``.txt``,
        ``.txt.gz``, ``.txt.zst``, ``.parquet``).
      output_prefix: Outputs are ``{output_prefix}_{key}_{level}.bin/.idx``.
      json_keys: Fields to tokenize, one output dataset per key (``.txt`` documents have ``text``).
      tokenizer: Tokenizer description.
      append_eod: Append the EOD id to every document.
      split_sentences: One sequence per sentence (``sentence_splitter``); level becomes ``sentence``.
      text_mode: ``line`` (one document per line) or ``file`` (one per file) for ``.txt`` inputs.
      workers: Worker processes for the local engine (0 = all cores).
      partitions: Number of partitions (0 = one per 32 MiB of input, at least 8).
      keep_parts: Keep the partial datasets as the output instead of merging them.
      log_interval: Log a progress line every this many documents (0 = never).
      on_error: ``skip`` bad records (counted and reported) or ``fail`` on the first one.
      max_document_chars: Drop documents longer than this many characters (0 = no limit).
      overwrite: Discard an earlier run into the same output prefix made with different settings.
      progress: Show a tqdm progress bar.
      drop_empty: Drop records with a key whose text has no tokens (counted as ``empty``); by
        default they are kept as documents with zero sequences, as Megatron-LM does.
      sentence_splitter: ``punkt`` (NLTK, as Megatron-LM) or ``builtin``.
      lang: Punkt language (Megatron's ``--lang``).
      keep_newlines: Keep newlines between sentences (Megatron's ``--keep-newlines``, Punkt only).
      cleaning: The cleaning stage before tokenization (docs/cleaning.md); None or all steps off =
        none.
      work_dir: With a gs:// or s3:// ``output_prefix``: the local directory where the run is built
        before publishing (None: a directory under the system temp named by a hash of the URL).
      object_store: How gs:// and s3:// are reached (None: ``ObjectStoreOptions.from_env()``).
      identity: Where the identities of the written datasets are remembered (None:
        ``IdentityStoreOptions.from_env()``; `jaxblend.preprocess.identity_record`).
      chat: Every ``json_keys`` field is a conversation (``[{"role", "content"}, ...]``), rendered
        with the Hugging Face tokenizer's own chat template; each key also gets a loss-mask
        dataset (`loss_mask_names`; docs/conversations.md).
    """

    input: tuple[str, ...]
    output_prefix: str
    json_keys: tuple[str, ...] = ("text",)
    tokenizer: tok_spec.TokenizerSpec = dataclasses.field(default_factory=tok_spec.TokenizerSpec)
    append_eod: bool = False
    split_sentences: bool = False
    text_mode: str = "line"
    workers: int = 0
    partitions: int = 0
    keep_parts: bool = False
    log_interval: int = 100_000
    on_error: str = "skip"
    max_document_chars: int = 0
    overwrite: bool = False
    progress: bool = True
    drop_empty: bool = False
    sentence_splitter: str = sentences.PUNKT
    lang: str = "english"
    keep_newlines: bool = False
    cleaning: CleaningConfig | None = None
    work_dir: str | None = None
    object_store: ObjectStoreOptions | None = None
    identity: IdentityStoreOptions | None = None
    chat: bool = False

    def __post_init__(self) -> None:
        if self.cleaning is not None and not self.cleaning.enabled:
            object.__setattr__(self, "cleaning", None)
        for name in ("input", "json_keys"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        if not self.input:
            raise ValueError("input=() must name at least one file or glob")
        if not self.output_prefix:
            raise ValueError("output_prefix='' must be a path prefix")
        if self.work_dir is not None and is_url(self.work_dir):
            raise ValueError(f"work_dir={self.work_dir!r} must be a local directory, not a URL")
        if not self.json_keys or len(set(self.json_keys)) != len(self.json_keys):
            raise ValueError(f"json_keys={self.json_keys!r} must be non-empty and without repeats")
        for key in self.json_keys:
            if not key or "/" in key or os.sep in key:
                raise ValueError(
                    f"json_keys entry {key!r} must be non-empty without '/' (used in file names)"
                )
        for name, allowed in (
            ("text_mode", partitions.TEXT_MODES),
            ("sentence_splitter", sentences.SPLITTERS),
            ("on_error", records_lib.ON_ERROR),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} must be one of {allowed}")
        for name, zero in (
            ("workers", " (0 = all cores)"),
            ("partitions", " (0 = automatic)"),
            ("log_interval", ""),
            ("max_document_chars", " (0 = no limit)"),
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0{zero}")
        if self.keep_newlines and not self.split_sentences:
            raise ValueError("keep_newlines applies only with split_sentences")
        if self.chat:
            _check_chat(self)

    @property
    def level(self) -> str:
        """``sentence`` with ``split_sentences``, else ``document``."""
        return "sentence" if self.split_sentences else "document"

    def output_names(self) -> dict[str, str]:
        """Returns key -> final dataset prefix ``{output_prefix}_{key}_{level}`` (Megatron-LM's)."""
        return {k: f"{self.output_prefix}_{k}_{self.level}" for k in self.json_keys}

    def loss_mask_names(self) -> dict[str, str]:
        """With ``chat``: key -> the prefix of its loss-mask dataset (in the side directory
        ``.jaxblend/`` beside the data, `jaxblend.loss_masks.loss_mask_prefix`); else empty."""
        if not self.chat:
            return {}
        return {k: loss_mask_prefix(name) for k, name in self.output_names().items()}

    def part_keys(self) -> tuple[str, ...]:
        """The keys of each partition's partial datasets: ``json_keys``, and with ``chat`` each
        key's loss masks (`chat_records.mask_key`)."""
        if not self.chat:
            return self.json_keys
        return self.json_keys + tuple(chat_records.mask_key(k) for k in self.json_keys)


def _check_chat(config: PreprocessConfig) -> None:
    """Refuses settings that conversations (``chat``) do not take, naming the setting."""
    if config.tokenizer.type != tok_spec.HUGGINGFACE:
        raise ValueError(
            f"--chat needs --tokenizer_type=HuggingFaceTokenizer (the chat template is read from "
            f"its model directory), not {config.tokenizer.type}"
        )
    for name in ("split_sentences", "cleaning", "drop_empty", "max_document_chars"):
        if getattr(config, name):
            raise ValueError(f"--chat does not take {name}: a conversation is one document")


@dataclasses.dataclass(frozen=True)
class PreprocessResult:
    """What a run produced.

    Attributes:
      outputs: key -> final dataset prefix (empty with ``keep_parts``).
      parts: key -> partial dataset prefixes in order (only with ``keep_parts``).
      dtype: Token dtype name.
      vocab_size: Tokenizer vocabulary size.
      partitions: Number of partitions.
      partitions_reused: Partitions found finished from an earlier run.
      records: Input records read.
      input_bytes: Input bytes read.
      keys: key -> {"documents", "sequences", "tokens", "bytes"} of the output.
      dropped: reason -> {"count", "examples": ["file:line ..."]}.
      seconds: Wall time of this call.
      cleaning: The cleaning report (:mod:`jaxblend.preprocess.cleaning.report`), or None.
      tokenizer: The tokenizer's facts (`jaxblend.tokenizer_facts.TokenizerFacts.to_json`: identity,
        vocabulary size, EOD and pad ids), or None (a run recorded before they were).
      published: With a bucket output prefix, what publishing did (one line), else None.
      loss_masks: With ``chat``: key -> the prefix of its loss-mask dataset (empty otherwise, and
        with ``keep_parts``).
    """

    outputs: dict[str, str]
    parts: dict[str, list[str]]
    dtype: str
    vocab_size: int
    partitions: int
    partitions_reused: int
    records: int
    input_bytes: int
    keys: dict[str, dict[str, int]]
    dropped: dict[str, dict[str, Any]]
    seconds: float
    cleaning: dict[str, Any] | None = None
    tokenizer: dict[str, Any] | None = None
    published: str | None = None
    loss_masks: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Returns the result as a JSON-able dict."""
        return dataclasses.asdict(self)

    def summary(self) -> str:
        """Returns a human-readable multi-line summary."""
        head = (
            f"preprocessed {self.records:,} records ({self.input_bytes / 1e6:,.1f} MB) in "
            f"{self.partitions} partitions ({self.partitions_reused} reused) in {self.seconds:.1f} s; "
            f"dtype {self.dtype}, vocab {self.vocab_size:,}"
        )
        lines = [head]
        for key, c in self.keys.items():
            where = self.outputs.get(key) or f"{len(self.parts.get(key, []))} parts"
            lines.append(
                f"  {key}: {c['documents']:,} documents ({c.get('empty_documents', 0):,} empty), "
                f"{c['sequences']:,} sequences, "
                f"{c['tokens']:,} tokens, {c['bytes']:,} bytes -> {where}"
            )
            if key in self.loss_masks or "trained_tokens" in c:
                lines.append(
                    f"    loss mask: {c.get('trained_tokens', 0):,} of {c['tokens']:,} tokens "
                    f"trained (assistant turns) -> {self.loss_masks.get(key, 'parts')}"
                )
        total = sum(d["count"] for d in self.dropped.values())
        lines.append(f"  dropped: {total:,} documents")
        for reason, d in self.dropped.items():
            lines.append(f"    {reason}: {d['count']:,}  e.g. " + "; ".join(d["examples"]))
        if self.cleaning is not None:
            lines.append(report_lib.table(self.cleaning))
        if self.published is not None:
            lines.append(self.published)
        return "\n".join(lines)

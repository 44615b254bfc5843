"""Tokenizes one partition into partial datasets: the unit of work of every engine.

:func:`process_partition` reads a partition's records, validates them (malformed JSON, non-UTF-8
bytes, missing key, non-string value, empty or oversize documents, tokenizer failures), tokenizes the
good documents in batches, writes one partial dataset per output key through
:class:`jaxblend.storage.IndexedDatasetBuilder` (temporary names, renamed when complete) and finally
writes the partition's done marker (see :mod:`jaxblend.preprocess.layout`). The local process pool
and the Apache Beam pipeline both call this function, so they produce byte-identical parts.

Per document: tokenize the text whole (or each sentence, one sequence per sentence, with
``split_sentences``; sentences without tokens are skipped), then append the EOD id to the last
sequence with ``append_eod``. Documents with no tokens are dropped as ``empty``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence

import numpy as np
from absl import logging

from jaxblend import storage
from jaxblend.preprocess import layout, readers, sentences
from jaxblend.preprocess import tokenizers as tok_lib

# Drop reasons, in report order.
MALFORMED_JSON = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
MISSING_KEY = "missing_key"
NOT_STRING = "not_string"
EMPTY = "empty"
OVERSIZE = "oversize"
TOKENIZER_ERROR = "tokenizer_error"
REASONS = (MALFORMED_JSON, INVALID_UTF8, MISSING_KEY, NOT_STRING, EMPTY, OVERSIZE, TOKENIZER_ERROR)

MAX_EXAMPLES = 5
ON_ERROR = ("skip", "fail")


class PreprocessDataError(ValueError):
    """A bad input record under ``on_error="fail"``; the message starts with ``file:line``."""


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to process partitions (picklable, shared by every engine).

    Attributes:
      tokenizer: How to load the tokenizer.
      json_keys: Fields to tokenize; one output dataset per key.
      text_mode: ``line`` or ``file`` for ``.txt`` inputs.
      append_eod: Append the tokenizer's EOD id to every document.
      split_sentences: One sequence per sentence (built-in splitter).
      max_document_chars: Drop documents longer than this many characters (0 = no limit).
      on_error: ``skip`` (count and report) or ``fail`` (raise on the first bad record).
      dtype: Token dtype name of the outputs.
      parts_dir: Directory of the partial datasets and done markers.
      level: ``document`` or ``sentence`` (output naming).
    """

    tokenizer: tok_lib.TokenizerSpec
    json_keys: tuple[str, ...]
    text_mode: str
    append_eod: bool
    split_sentences: bool
    max_document_chars: int
    on_error: str
    dtype: str
    parts_dir: str
    level: str


class DropStats:
    """Counts dropped documents by reason and keeps the locations of the first few."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}

    def add(self, reason: str, where: str, count: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + count
        ex = self.examples.setdefault(reason, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(where)

    def to_json(self) -> dict[str, dict[str, object]]:
        return {
            r: {"count": self.counts[r], "examples": self.examples.get(r, [])}
            for r in REASONS
            if r in self.counts
        }


class _Batch:
    """Texts of one output key collected from a raw batch, with their record ordinals."""

    __slots__ = ("ordinals", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.ordinals: list[int] = []


class _PartitionWriter:
    """Validates, tokenizes and writes the records of one partition."""

    def __init__(
        self,
        config: WorkerConfig,
        tokenizer: tok_lib.Tokenizer,
        partition: readers.Partition,
        progress: Callable[[int, int, int], None] | None,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.partition = partition
        self.progress = progress
        self.dtype = np.dtype(config.dtype)
        self.eod = tokenizer.eod if config.append_eod else None
        self.drops = DropStats()
        self.records = 0
        self.input_bytes = 0
        self.counts = {k: {"documents": 0, "sequences": 0, "tokens": 0} for k in config.json_keys}
        self.locate: readers.Locator | None = None
        self.builders: dict[str, storage.IndexedDatasetBuilder] = {}

    # ------------------------------------------------------------------ dropping

    def _drop(self, reason: str, ordinal: int, key: str | None, detail: str) -> None:
        assert self.locate is not None
        where = self.locate(ordinal)
        if key is not None:
            where = f"{where} (key {key!r})"
        if self.config.on_error == "fail":
            raise PreprocessDataError(f"{where}: {reason}: {detail}")
        self.drops.add(reason, where)

    # ------------------------------------------------------------------ decoding

    def _decode(self, raw: readers.RawBatch, fmt: str) -> dict[str, _Batch]:
        keys = self.config.json_keys
        batches = {k: _Batch() for k in keys}
        max_chars = self.config.max_document_chars
        is_json = fmt.startswith("jsonl")
        is_parquet = fmt == "parquet"
        for ordinal, payload in zip(raw.ordinals, raw.payloads):
            self.records += 1
            if is_parquet:
                fields = payload
            else:
                try:
                    text = payload.decode("utf-8")
                except UnicodeDecodeError as e:
                    self._drop(
                        INVALID_UTF8,
                        ordinal,
                        None,
                        f"not valid UTF-8 ({e.reason} at byte {e.start})",
                    )
                    continue
                if is_json:
                    if not text or text.isspace():
                        self._drop(EMPTY, ordinal, None, "blank line")
                        continue
                    try:
                        fields = json.loads(text)
                    except ValueError as e:
                        self._drop(MALFORMED_JSON, ordinal, None, str(e))
                        continue
                    if not isinstance(fields, dict):
                        self._drop(MALFORMED_JSON, ordinal, None, "not a JSON object")
                        continue
                else:
                    fields = {"text": text}
            for key in keys:
                value = fields.get(key)
                if value is None:
                    self._drop(MISSING_KEY, ordinal, key, f"no field {key!r}")
                    continue
                if not isinstance(value, str):
                    self._drop(NOT_STRING, ordinal, key, f"field {key!r} is {type(value).__name__}")
                    continue
                if max_chars and len(value) > max_chars:
                    self._drop(
                        OVERSIZE,
                        ordinal,
                        key,
                        f"{len(value)} characters > max_document_chars={max_chars}",
                    )
                    continue
                if not value or value.isspace():
                    self._drop(EMPTY, ordinal, key, "empty text")
                    continue
                b = batches[key]
                b.texts.append(value)
                b.ordinals.append(ordinal)
        return batches

    # ------------------------------------------------------------------ tokenizing

    def _tokenize(
        self, key: str, texts: Sequence[str], ordinals: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Returns (flat ids, lengths, kept mask) for texts; failing texts are dropped."""
        try:
            flat, lengths = self.tokenizer.tokenize_batch(texts)
            return flat, lengths, np.ones(len(texts), dtype=bool)
        except Exception as e:  # noqa: BLE001 - retried one by one to find the culprit(s)
            logging.debug("batch tokenization failed (%s); retrying document by document", e)
        pieces: list[np.ndarray] = []
        kept = np.ones(len(texts), dtype=bool)
        for i, text in enumerate(texts):
            try:
                pieces.append(np.asarray(self.tokenizer.tokenize(text), dtype=np.int64))
            except UnicodeError as e:
                kept[i] = False
                self._drop(INVALID_UTF8, ordinals[i], key, f"text is not encodable as UTF-8: {e}")
            except Exception as e:  # noqa: BLE001
                kept[i] = False
                self._drop(TOKENIZER_ERROR, ordinals[i], key, f"{type(e).__name__}: {e}")
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        flat = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        return flat, lengths, kept

    def _write_documents(self, key: str, batch: _Batch) -> None:
        if not batch.texts:
            return
        if self.config.split_sentences:
            self._write_sentence_documents(key, batch)
            return
        flat, lengths, kept = self._tokenize(key, batch.texts, batch.ordinals)
        ordinals = [o for o, k in zip(batch.ordinals, kept) if k]
        zero = lengths == 0
        if zero.any():
            for i in np.flatnonzero(zero):
                self._drop(EMPTY, ordinals[i], key, "no tokens")
            lengths = lengths[~zero]
        flat = flat.astype(self.dtype, copy=False)
        if self.eod is not None and lengths.size:
            flat, lengths = _append_eod(flat, lengths, self.eod, self.dtype)
        b = self.builders[key]
        start = 0
        for end in np.cumsum(lengths).tolist():
            b.add_sequence(flat[start:end])
            b.end_document()
            start = end
        c = self.counts[key]
        c["documents"] += int(lengths.shape[0])
        c["sequences"] += int(lengths.shape[0])
        c["tokens"] += int(flat.shape[0])

    def _write_sentence_documents(self, key: str, batch: _Batch) -> None:
        per_doc = [sentences.split_sentences(t) for t in batch.texts]
        flat_sents = [s for doc in per_doc for s in doc]
        counts = [len(doc) for doc in per_doc]
        sent_ordinals = [o for o, n in zip(batch.ordinals, counts) for _ in range(n)]
        flat, lengths, kept = self._tokenize(key, flat_sents, sent_ordinals)
        flat = flat.astype(self.dtype, copy=False)
        full_len = np.zeros(len(flat_sents), dtype=np.int64)
        full_len[kept] = lengths
        starts = np.concatenate([[0], np.cumsum(full_len)]).tolist()
        full = full_len.tolist()
        eod = np.asarray([self.eod], dtype=self.dtype) if self.eod is not None else None
        b = self.builders[key]
        c = self.counts[key]
        s = 0
        for d, n in enumerate(counts):
            lo, hi = s, s + n
            s = hi
            if not kept[lo:hi].all():
                continue  # dropped in _tokenize (a sentence failed to tokenize)
            idx = [i for i in range(lo, hi) if full[i] > 0]
            if not idx:
                self._drop(EMPTY, batch.ordinals[d], key, "no tokens")
                continue
            for j, i in enumerate(idx):
                piece = flat[starts[i] : starts[i + 1]]
                if eod is not None and j == len(idx) - 1:
                    piece = np.concatenate([piece, eod])
                b.add_sequence(piece)
                c["tokens"] += int(piece.shape[0])
            b.end_document()
            c["documents"] += 1
            c["sequences"] += len(idx)

    # ------------------------------------------------------------------ driver

    def run(self) -> dict[str, object]:
        cfg = self.config
        keys = cfg.json_keys
        prefixes = {
            k: layout.part_prefix(cfg.parts_dir, self.partition.index, k, cfg.level) for k in keys
        }
        try:
            for k in keys:
                self.builders[k] = storage.IndexedDatasetBuilder(prefixes[k], dtype=self.dtype)
            for piece in self.partition.pieces:
                self.locate = readers.Locator(piece, cfg.text_mode)
                for raw in readers.iter_piece(piece, cfg.text_mode, columns=keys):
                    batches = self._decode(raw, piece.format)
                    before = sum(c["documents"] for c in self.counts.values())
                    tokens_before = sum(c["tokens"] for c in self.counts.values())
                    for k in keys:
                        self._write_documents(k, batches[k])
                    self.input_bytes += raw.consumed
                    if self.progress is not None:
                        self.progress(
                            raw.consumed,
                            sum(c["documents"] for c in self.counts.values()) - before,
                            sum(c["tokens"] for c in self.counts.values()) - tokens_before,
                        )
            for k in keys:
                self.builders[k].finalize()
        except BaseException:
            for b in self.builders.values():
                b.abort()
            raise
        result = {
            "index": self.partition.index,
            "records": self.records,
            "input_bytes": self.input_bytes,
            "keys": self.counts,
            "dropped": self.drops.to_json(),
            "files": {k: layout.file_sizes(prefixes[k]) for k in keys},
        }
        layout.write_done_marker(cfg.parts_dir, self.partition.index, result)
        return result


def _append_eod(
    flat: np.ndarray, lengths: np.ndarray, eod: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Inserts ``eod`` after each document of a flat batch (vectorized)."""
    n = lengths.shape[0]
    new_lengths = lengths + 1
    ends = np.cumsum(new_lengths)
    out = np.empty(int(ends[-1]) if n else 0, dtype=dtype)
    is_tok = np.ones(out.shape[0], dtype=bool)
    is_tok[ends - 1] = False
    out[is_tok] = flat
    out[~is_tok] = eod
    return out, new_lengths


_TOKENIZER_CACHE: dict[tok_lib.TokenizerSpec, tok_lib.Tokenizer] = {}


def tokenizer_for(spec: tok_lib.TokenizerSpec) -> tok_lib.Tokenizer:
    """Returns this process's tokenizer for ``spec``, loading it once."""
    tok = _TOKENIZER_CACHE.get(spec)
    if tok is None:
        tok = _TOKENIZER_CACHE[spec] = tok_lib.load_tokenizer(spec)
    return tok


def process_partition(
    config: WorkerConfig,
    partition: readers.Partition,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[str, object]:
    """Tokenizes one partition into its partial datasets and writes its done marker.

    Args:
      config: Worker settings.
      partition: The partition to process.
      progress: Called with ``(input_bytes, documents, tokens)`` increments after every batch.

    Returns:
      The partition's result (also stored in its done marker): records, input_bytes, per-key counts,
      drops by reason with example locations, file sizes.

    Raises:
      PreprocessDataError: A bad record with ``on_error="fail"`` (message starts with file:line).
      readers.InputError: An input cannot be read.
    """
    tokenizer = tokenizer_for(config.tokenizer)
    return _PartitionWriter(config, tokenizer, partition, progress).run()

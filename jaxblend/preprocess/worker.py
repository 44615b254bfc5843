"""Tokenizes one partition into partial datasets: the unit of work of every engine.

:func:`process_partition` reads a partition's records, validates them
(:mod:`jaxblend.preprocess.records`: malformed JSON, non-UTF-8 bytes, missing key, wrong value
type, oversize documents; here: tokenizer failures), tokenizes them in batches, writes one partial dataset per output key through
:class:`jaxblend.storage.IndexedDatasetBuilder` (temporary names, renamed when complete) and finally writes the partition's done marker (see
:mod:`jaxblend.preprocess.layout`). The local process pool and the Apache Beam pipeline both call
this function, so they produce byte-identical parts.

Per record and key, Megatron-LM's ``preprocess_data.py`` rules (docs/preprocessing.md): the value is
a string (one piece; with ``split_sentences`` one piece per sentence) or a list of strings (one
piece per item); every piece with at least one token becomes a sequence; with ``append_eod`` the EOD
id ends the last sequence of a document that has one. A document whose pieces have no tokens (an
empty text) is kept as a document with zero sequences, unless ``drop_empty`` is set. A record that
is dropped for any reason is dropped for every key, so the datasets of several keys stay aligned.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from absl import logging

from jaxblend import storage
from jaxblend._pause import pause_point
from jaxblend.preprocess import chat_records, layout, readers, records, sentences
from jaxblend.preprocess import partitions as partitions_lib
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess import tokenizers as tok_lib
from jaxblend.preprocess.cleaning import cleaner as cleaner_lib
from jaxblend.preprocess.cleaning import join as join_lib
from jaxblend.preprocess.cleaning import signatures as sig_lib
from jaxblend.preprocess.cleaning import text as text_lib
from jaxblend.preprocess.config import PreprocessConfig
from jaxblend.preprocess.records import (
    EMPTY,
    INVALID_UTF8,
    TOKENIZER_ERROR,
)

TOKENIZE = "tokenize"
SIGNATURES = "signatures"


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What a worker needs to process partitions (picklable, shared by every engine).

    Attributes:
      run: The run's settings (keys, tokenizer, Megatron's rules, cleaning, ``chat``, ...).
      dtype: Token dtype name of the outputs.
      parts_dir: Directory of the partial datasets and done markers.
      mode: ``tokenize`` (write partial datasets) or ``signatures`` (the deduplication pass: write
        the partition's hashes and MinHash signatures, :mod:`jaxblend.preprocess.cleaning.signatures`).
    """

    run: PreprocessConfig
    dtype: str
    parts_dir: str
    mode: str = TOKENIZE


@dataclasses.dataclass
class _Records:
    """The valid records of one raw batch: per key, each record's pieces (sentences) in order
    (with ``chat``, its one rendered conversation), and the records' ordinals and input bytes."""

    pieces: dict[str, list[list[Any]]]
    ordinals: list[int] = dataclasses.field(default_factory=list)
    sizes: list[int] = dataclasses.field(default_factory=list)


class _Tokenized(NamedTuple):
    """One key's tokens for a batch of records: flat ids, piece lengths, pieces per record."""

    flat: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray


class _PartitionWriter:
    """Validates, tokenizes and writes the records of one partition.

    A record is kept or dropped for every output key together, so the datasets of several
    ``json_keys`` stay aligned record by record.
    """

    def __init__(
        self,
        config: WorkerConfig,
        tokenizer: tok_spec.Tokenizer,
        partition: partitions_lib.Partition,
        progress: Callable[[int, int, int], None] | None,
    ) -> None:
        self.config = config
        self.settings = run = config.run
        self.tokenizer = tokenizer
        self.partition = partition
        self.progress = progress or (lambda nbytes, documents, tokens: None)
        self.dtype = np.dtype(config.dtype)
        self.eod = tokenizer.eod if run.append_eod else None
        self.splitter = (
            splitter_for(run.sentence_splitter, run.lang, run.keep_newlines)
            if run.split_sentences
            else None
        )
        self.check = records.RecordChecker(run.on_error, run.max_document_chars)
        self.records = 0
        self.input_bytes = 0
        self.counts = {
            k: {"documents": 0, "sequences": 0, "tokens": 0, "empty_documents": 0}
            for k in run.json_keys
        }
        self.builders: dict[str, storage.IndexedDatasetBuilder] = {}
        # input path -> {"records", "documents", "dropped": `records.Drops`}
        self.inputs: dict[str, dict[str, Any]] = {}
        self.cleaner: cleaner_lib.Cleaner | None = None
        self.signer: sig_lib.SignatureWriter | None = None  # the deduplication pass
        if run.cleaning is not None:
            duplicates = decided = None  # the join's drops and the first pass's decisions
            if config.mode == TOKENIZE and run.cleaning.needs_join:
                duplicates = join_lib.load_drops(config.parts_dir, partition.index)
                reasons = cleaner_lib.REASONS
                decided = sig_lib.load_decisions(config.parts_dir, partition.index, reasons)
            self.cleaner = cleaner_lib.Cleaner(run.cleaning, duplicates, decided)
            if config.mode == SIGNATURES:
                self.signer = sig_lib.SignatureWriter(run.cleaning)  # takes every kept record
        self.chat = (
            chat_records.ConversationRecords(
                self.check, run.tokenizer, tokenizer, run.json_keys, self.eod, self.dtype
            )
            if run.chat
            else None
        )

    # ------------------------------------------------------------------ decoding

    def _pieces(self, value: str | list[str]) -> list[str]:
        """The sequences-to-be of one field (Megatron's rules; a rendered conversation, a tuple, is
        its one piece)."""
        if isinstance(value, list):
            return value  # already one string per sequence (Megatron's split-sentence form)
        if self.splitter is not None:
            return self.splitter(value)
        return [value]

    def _decode(self, raw: readers.RawBatch, fmt: str) -> _Records:
        keys = self.settings.json_keys
        render = self.chat.render if self.chat is not None else None  # conversations
        out = _Records({k: [] for k in keys})
        for ordinal, payload in zip(raw.ordinals, raw.payloads):
            position = self.records  # the record's place in the partition (every record counts)
            self.records += 1
            per_key = self.check.values(ordinal, payload, fmt, keys, render)
            if per_key is None:
                continue
            if self.cleaner is not None:
                cleaned, reason = self.cleaner.clean(position, per_key, self.check.nbytes)
                if cleaned is None:
                    self.check.count(reason, ordinal)  # a cleaning drop is not a bad record
                    continue
                per_key = cleaned
            if self.signer is not None:
                self.signer.add(position, text_lib.record_text(per_key))
                continue
            out.ordinals.append(ordinal)
            out.sizes.append(self.check.nbytes)
            for key in keys:
                out.pieces[key].append(self._pieces(per_key[key]))
        return out

    # ------------------------------------------------------------------ tokenizing

    def _tokenize(self, key: str, recs: _Records, kept: np.ndarray) -> _Tokenized:
        """Tokenizes every piece of every record; records whose pieces fail are unkept."""
        docs, ordinals = recs.pieces[key], recs.ordinals
        counts = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        texts = [p for doc in docs for p in doc]
        try:
            flat, lengths = self.tokenizer.tokenize_batch(texts)
            return _Tokenized(flat, lengths, counts)
        except Exception as e:  # noqa: BLE001 - retried one by one to find the culprit(s)
            logging.debug("batch tokenization failed (%s); retrying piece by piece", e)
        pieces: list[np.ndarray] = []
        record = np.repeat(np.arange(len(docs)), counts)
        for i, text in enumerate(texts):
            r = int(record[i])
            try:
                ids = np.asarray(self.tokenizer.tokenize(text), dtype=np.int64)
            except Exception as e:  # noqa: BLE001
                ids = np.zeros(0, np.int64)
                if kept[r]:
                    reason, detail = (
                        (INVALID_UTF8, f"text is not encodable: {e}")
                        if isinstance(e, UnicodeError)
                        else (TOKENIZER_ERROR, f"{type(e).__name__}: {e}")
                    )
                    self.check.drop(reason, ordinals[r], key, detail, recs.sizes[r])
                kept[r] = False
            pieces.append(ids)
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        flat = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        return _Tokenized(flat, lengths, counts)

    def _write_batch(self, recs: _Records) -> None:
        if self.chat is not None:
            self.chat.write(recs.pieces, self.builders, self.counts)
            return
        keys = self.settings.json_keys
        n = len(recs.ordinals)
        if not n:
            return
        kept = np.ones(n, dtype=bool)
        toks = {k: self._tokenize(k, recs, kept) for k in keys}
        if self.settings.drop_empty:
            for k in keys:
                t = toks[k]
                record = np.repeat(np.arange(n), t.counts)
                tokens = np.bincount(record, weights=t.lengths, minlength=n)
                for r in np.flatnonzero(kept & (tokens == 0)).tolist():
                    detail = "no tokens (--drop_empty_documents)"
                    self.check.drop(EMPTY, recs.ordinals[r], k, detail, recs.sizes[r])
                    kept[r] = False
        for k in keys:
            self._write_key(k, toks[k], kept)

    def _write_key(self, key: str, t: _Tokenized, kept: np.ndarray) -> None:
        """Writes the kept records of one key: non-empty pieces are sequences, EOD after the last."""
        n = kept.shape[0]
        piece_rec = np.repeat(np.arange(n), t.counts)
        tok_keep = np.repeat(kept[piece_rec], t.lengths)
        flat = t.flat[tok_keep].astype(self.dtype, copy=False)
        sel = kept[piece_rec] & (t.lengths > 0)
        seq_len = t.lengths[sel]
        seq_rec = piece_rec[sel]
        seqs_per_rec = np.bincount(seq_rec, minlength=n)[kept]
        if self.eod is not None and seq_len.size:
            is_last = np.ones(seq_len.shape[0], dtype=bool)
            is_last[:-1] = seq_rec[1:] != seq_rec[:-1]
            flat, seq_len = _append_eod(flat, seq_len, is_last, self.eod, self.dtype)
        b = self.builders[key]
        tok_ends = np.cumsum(seq_len).tolist()
        seq_ends = np.cumsum(seqs_per_rec).tolist()
        lens = seq_len.tolist()
        s0 = t0 = 0
        for s1 in seq_ends:
            t1 = tok_ends[s1 - 1] if s1 > 0 else 0
            b.add_document(flat[t0:t1], lens[s0:s1])
            s0, t0 = s1, t1
        c = self.counts[key]
        c["documents"] += int(seqs_per_rec.shape[0])
        c["empty_documents"] += int((seqs_per_rec == 0).sum())
        c["sequences"] += int(seq_len.shape[0])
        c["tokens"] += int(flat.shape[0])

    # ------------------------------------------------------------------ driver

    def _total(self, field: str) -> int:
        return sum(c[field] for c in self.counts.values())

    def run(self) -> dict[str, object]:
        """Reads the partition; tokenizes it into its partial datasets and writes its done marker,
        or, in the deduplication pass (``mode`` ``signatures``), writes its signatures."""
        cfg, run = self.config, self.settings
        # with chat, the conversations' loss masks too; no partial datasets in the first pass
        keys = () if self.signer is not None else run.part_keys()
        prefixes = {
            k: layout.part_prefix(cfg.parts_dir, self.partition.index, k, run.level) for k in keys
        }
        dropped: records.Drops = {}
        first_key = self.counts[run.json_keys[0]]  # every key has the same documents
        try:
            for k in keys:
                dtype = chat_records.MASK_DTYPE if k not in run.json_keys else self.dtype
                self.builders[k] = storage.IndexedDatasetBuilder(prefixes[k], dtype=dtype)
            for piece in self.partition.pieces:
                self.check.locate = readers.Locator(piece, run.text_mode)
                self.check.drops = {}  # this piece's: added to its input's and the partition's
                records_before, documents_before = self.records, first_key["documents"]
                for raw in readers.iter_piece(piece, run.text_mode, columns=run.json_keys):
                    batch = self._decode(raw, piece.format)
                    documents, tokens = self._total("documents"), self._total("tokens")
                    self._write_batch(batch)
                    self.input_bytes += raw.consumed
                    documents_now, tokens_now = self._total("documents"), self._total("tokens")
                    self.progress(raw.consumed, documents_now - documents, tokens_now - tokens)
                entry = self.inputs.setdefault(
                    piece.path, {"records": 0, "documents": 0, "dropped": {}}
                )
                entry["records"] += self.records - records_before
                entry["documents"] += first_key["documents"] - documents_before
                records.add_drops(entry["dropped"], self.check.drops)
                records.add_drops(dropped, self.check.drops)
            for k in keys:
                self.builders[k].finalize()
        except BaseException:
            for b in self.builders.values():
                b.abort()
            raise
        if self.signer is not None:
            assert self.cleaner is not None
            self.signer.write(cfg.parts_dir, self.partition.index, *self.cleaner.decisions())
            return {"index": self.partition.index}
        result = {
            "index": self.partition.index,
            "records": self.records,
            "input_bytes": self.input_bytes,
            "keys": self.counts,
            "dropped": records.in_report_order(dropped),
            "files": {k: layout.file_sizes(prefixes[k]) for k in keys},
            "inputs": self.inputs,
        }
        if self.cleaner is not None:
            result["cleaning"] = self.cleaner.to_json()
        # the partition is finished once its marker is written, after its datasets are in place
        layout.write_json_atomic(layout.done_marker_path(cfg.parts_dir, self.partition.index), result)
        return result


def _append_eod(
    flat: np.ndarray, lengths: np.ndarray, where: np.ndarray, eod: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Inserts ``eod`` after every sequence of a flat batch whose ``where`` is set (vectorized)."""
    new_lengths = lengths + where
    ends = np.cumsum(new_lengths)
    out = np.empty(int(ends[-1]) if ends.size else 0, dtype=dtype)
    is_tok = np.ones(out.shape[0], dtype=bool)
    is_tok[ends[where] - 1] = False
    out[is_tok] = flat
    out[~is_tok] = eod
    return out, new_lengths


@functools.cache
def splitter_for(kind: str, lang: str, keep_newlines: bool) -> sentences.Splitter:
    """Returns this process's sentence splitter, loading it once."""
    return sentences.make_splitter(kind, lang, keep_newlines)


@functools.cache
def tokenizer_for(spec: tok_spec.TokenizerSpec) -> tok_spec.Tokenizer:
    """Returns this process's tokenizer for ``spec``, loading it once."""
    return tok_lib.load_tokenizer(spec)


def process_partition(
    config: WorkerConfig,
    partition: partitions_lib.Partition,
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
    pause_point("partition", partition.index)
    tokenizer = tokenizer_for(config.run.tokenizer)
    return _PartitionWriter(config, tokenizer, partition, progress).run()

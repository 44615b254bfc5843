"""Preprocessing driver: plan, run partitions on an engine, merge, report — resumable and atomic.

:func:`preprocess` turns raw text into ``{output_prefix}_{key}_{level}.bin/.idx``:

1. Resolve the inputs, load the tokenizer (a missing or unreadable tokenizer file, or inputs matching
   nothing, fail here, before any work), pick the token dtype from the vocabulary size.
2. Cut the inputs into partitions (:func:`jaxblend.preprocess.readers.plan_partitions`; depends on the
   inputs and ``partitions`` only, never on ``workers``).
3. Check the run manifest (:mod:`jaxblend.preprocess.layout`): same settings → resume; different
   settings → refuse unless ``overwrite``.
4. Process every unfinished partition on the engine: the local process pool (``workers`` processes,
   spawn start method, tokenizer loaded once per process) or Apache Beam
   (:mod:`jaxblend.preprocess.beam`). Each partition writes its partial datasets then its done marker.
5. Merge the parts in partition order into the final datasets (temporary names, then rename) unless
   ``keep_parts``; mark the manifest complete; delete the parts.

Killed at any point and rerun with the same settings, it redoes only unfinished partitions (and the
merge) and produces byte-identical output, whatever the number of workers.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import multiprocessing
import os
import queue as queue_lib
import shutil
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import tqdm
from absl import logging

from jaxblend import storage
from jaxblend._pause import pause_point
from jaxblend.preprocess import layout, readers, sentences, worker
from jaxblend.preprocess import tokenizers as tok_lib
from jaxblend.preprocess.cleaning import join as join_lib
from jaxblend.preprocess.cleaning import report as report_lib
from jaxblend.preprocess.cleaning import signatures as sig_lib
from jaxblend.preprocess.cleaning.config import CleaningConfig

Progress = Callable[[int, int, int], None]


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
    """

    input: tuple[str, ...]
    output_prefix: str
    json_keys: tuple[str, ...] = ("text",)
    tokenizer: tok_lib.TokenizerSpec = dataclasses.field(default_factory=tok_lib.TokenizerSpec)
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

    def __post_init__(self) -> None:
        if self.cleaning is not None and not self.cleaning.enabled:
            object.__setattr__(self, "cleaning", None)
        if isinstance(self.input, str):
            object.__setattr__(self, "input", (self.input,))
        object.__setattr__(self, "input", tuple(self.input))
        if isinstance(self.json_keys, str):
            object.__setattr__(self, "json_keys", (self.json_keys,))
        object.__setattr__(self, "json_keys", tuple(self.json_keys))
        if not self.input:
            raise ValueError("input=() must name at least one file or glob")
        if not self.output_prefix:
            raise ValueError("output_prefix='' must be a path prefix")
        if not self.json_keys or len(set(self.json_keys)) != len(self.json_keys):
            raise ValueError(f"json_keys={self.json_keys!r} must be non-empty and without repeats")
        for key in self.json_keys:
            if not key or "/" in key or os.sep in key:
                raise ValueError(
                    f"json_keys entry {key!r} must be non-empty without '/' (used in file names)"
                )
        if self.text_mode not in readers.TEXT_MODES:
            raise ValueError(f"text_mode={self.text_mode!r} must be one of {readers.TEXT_MODES}")
        if self.workers < 0:
            raise ValueError(f"workers={self.workers} must be >= 0 (0 = all cores)")
        if self.partitions < 0:
            raise ValueError(f"partitions={self.partitions} must be >= 0 (0 = automatic)")
        if self.log_interval < 0:
            raise ValueError(f"log_interval={self.log_interval} must be >= 0")
        if self.sentence_splitter not in sentences.SPLITTERS:
            raise ValueError(
                f"sentence_splitter={self.sentence_splitter!r} must be one of {sentences.SPLITTERS}"
            )
        if self.keep_newlines and not self.split_sentences:
            raise ValueError("keep_newlines applies only with split_sentences")
        if self.on_error not in worker.ON_ERROR:
            raise ValueError(f"on_error={self.on_error!r} must be one of {worker.ON_ERROR}")
        if self.max_document_chars < 0:
            raise ValueError(
                f"max_document_chars={self.max_document_chars} must be >= 0 (0 = no limit)"
            )

    @property
    def level(self) -> str:
        """``sentence`` with ``split_sentences``, else ``document``."""
        return "sentence" if self.split_sentences else "document"

    def output_names(self) -> dict[str, str]:
        """Returns key -> final dataset prefix."""
        return {k: layout.dataset_name(self.output_prefix, k, self.level) for k in self.json_keys}


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
        total = sum(d["count"] for d in self.dropped.values())
        lines.append(f"  dropped: {total:,} documents")
        for reason, d in self.dropped.items():
            lines.append(f"    {reason}: {d['count']:,}  e.g. " + "; ".join(d["examples"]))
        if self.cleaning is not None:
            lines.append(report_lib.table(self.cleaning))
        return "\n".join(lines)


class Engine(Protocol):
    """Runs partitions (each via :func:`jaxblend.preprocess.worker.process_partition`).

    An engine may also offer ``join_duplicates(parts, indices, cleaning_config) -> stats`` to run
    the deduplication join itself (the Beam engine does); otherwise it runs on this machine
    (:func:`jaxblend.preprocess.cleaning.join.run_join`).
    """

    def run(
        self,
        config: worker.WorkerConfig,
        partitions: Sequence[readers.Partition],
        progress: Progress,
    ) -> None: ...


class LocalEngine:
    """Runs partitions in this process (``workers <= 1``) or in a spawn process pool."""

    def __init__(self, workers: int) -> None:
        self.workers = workers if workers > 0 else (len(os.sched_getaffinity(0)) or 1)

    def run(
        self,
        config: worker.WorkerConfig,
        partitions: Sequence[readers.Partition],
        progress: Progress,
    ) -> None:
        """Processes ``partitions``; returns when all are done; raises the first failure."""
        if not partitions:
            return
        if self.workers <= 1 or len(partitions) == 1:
            for p in partitions:
                worker.process_partition(config, p, progress)
            return
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        n = min(self.workers, len(partitions))
        with cf.ProcessPoolExecutor(
            max_workers=n, mp_context=ctx, initializer=_init_pool_worker, initargs=(config, q)
        ) as pool:
            futures = [pool.submit(_pool_process, config, p) for p in partitions]
            pending = set(futures)
            try:
                while pending:
                    done, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
                    _drain(q, progress)
                    for f in done:
                        f.result()  # re-raises a worker's exception
            except BaseException:
                for f in pending:
                    f.cancel()
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            _drain(q, progress)


_POOL_QUEUE: Any = None


def _init_pool_worker(config: worker.WorkerConfig, q: Any) -> None:
    global _POOL_QUEUE
    _POOL_QUEUE = q
    # One worker process per core: keep Hugging Face tokenizers from starting a thread pool in each.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    worker.tokenizer_for(config.tokenizer)  # load once per process


def _queue_progress(nbytes: int, docs: int, tokens: int) -> None:
    _POOL_QUEUE.put((nbytes, docs, tokens))


def _pool_process(config: worker.WorkerConfig, partition: readers.Partition) -> int:
    worker.process_partition(config, partition, _queue_progress)
    return partition.index


def _drain(q: Any, progress: Progress) -> None:
    while True:
        try:
            nbytes, docs, tokens = q.get_nowait()
        except queue_lib.Empty:
            return
        progress(nbytes, docs, tokens)


class _ProgressBar:
    """tqdm over input bytes (MB/s, ETA) with docs/s and tokens/s, plus periodic log lines."""

    def __init__(
        self, total: int, initial: int, enabled: bool, log_interval: int, desc: str = "preprocess"
    ) -> None:
        self.bar = tqdm.tqdm(
            total=total,
            initial=initial,
            unit="B",
            unit_scale=True,
            unit_divisor=1000,
            desc=desc,
            disable=not enabled,
            smoothing=0.1,
        )
        self.start = time.perf_counter()
        self.docs = 0
        self.tokens = 0
        self.log_interval = log_interval
        self.next_log = log_interval

    def __call__(self, nbytes: int, docs: int, tokens: int) -> None:
        self.docs += docs
        self.tokens += tokens
        self.bar.update(nbytes)
        dt = max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix_str(
            f"{self.docs / dt:,.0f} docs/s, {self.tokens / dt:,.0f} tok/s", refresh=False
        )
        if self.log_interval and self.docs >= self.next_log:
            logging.info(
                "processed %d documents, %d tokens (%.0f docs/s, %.0f tokens/s, %.1f MB/s)",
                self.docs,
                self.tokens,
                self.docs / dt,
                self.tokens / dt,
                self.bar.n / dt / 1e6,
            )
            self.next_log = (self.docs // self.log_interval + 1) * self.log_interval

    def close(self) -> None:
        self.bar.close()


def _settings(
    config: PreprocessConfig,
    files: Sequence[readers.InputFile],
    tokenizer: tok_lib.Tokenizer,
    dtype: np.dtype,
    plan: Sequence[readers.Partition],
) -> dict[str, Any]:
    """The settings that determine the output bytes (compared on resume)."""
    settings = {
        "inputs": [dataclasses.asdict(f) for f in files],
        "json_keys": list(config.json_keys),
        "text_mode": config.text_mode,
        "tokenizer": config.tokenizer.identity(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "append_eod": config.append_eod,
        "split_sentences": config.split_sentences,
        "sentence_splitter": config.sentence_splitter if config.split_sentences else None,
        "lang": config.lang if config.split_sentences else None,
        "keep_newlines": config.keep_newlines,
        "drop_empty": config.drop_empty,
        "max_document_chars": config.max_document_chars,
        "partitions_requested": config.partitions,
        "partitions": [[dataclasses.asdict(p) for p in part.pieces] for part in plan],
    }
    if config.cleaning is not None:  # absent without cleaning: earlier runs' manifests still match
        settings["cleaning"] = config.cleaning.identity()
    return settings


def _diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            a, b = repr(old.get(k)), repr(new.get(k))
            if len(a) > 120 or len(b) > 120:
                out.append(f"{k} differs")
            else:
                out.append(f"{k}: {a} -> {b}")
    return out


class SettingsMismatchError(ValueError):
    """The output prefix holds a run made with different settings."""


def _prepare(config: PreprocessConfig, settings: dict[str, Any]) -> dict[str, Any]:
    """Checks or creates the manifest; returns it."""
    mpath = layout.manifest_path(config.output_prefix)
    manifest = layout.read_json(mpath)
    names = list(config.output_names().values())
    if manifest is not None and manifest.get("settings") != settings:
        if not config.overwrite:
            changes = _diff(manifest.get("settings") or {}, settings)
            raise SettingsMismatchError(
                f"output prefix {config.output_prefix!r} holds a run made with different settings "
                f"({mpath}): {'; '.join(changes)}. Rerun with the original settings to resume, "
                "choose another --output_prefix, or pass --overwrite to discard it"
            )
        old_names = list((manifest.get("outputs") or {}).values())
        layout.remove_outputs(config.output_prefix, names + old_names)
        manifest = None
    if manifest is None:
        existing = [f"{n}.{e}" for n in names for e in ("bin", "idx") if os.path.exists(f"{n}.{e}")]
        if existing and not config.overwrite:
            raise SettingsMismatchError(
                f"output {existing[0]!r} already exists and has no run manifest ({mpath}); "
                "pass --overwrite to replace it or choose another --output_prefix"
            )
        if config.overwrite:
            layout.remove_outputs(config.output_prefix, names)
        manifest = {"version": layout.MANIFEST_VERSION, "status": "running", "settings": settings}
        layout.write_json_atomic(mpath, manifest)
    return manifest


def _aggregate(
    results: Sequence[dict[str, Any]], keys: Sequence[str], itemsize: int
) -> tuple[int, int, dict[str, dict[str, int]], dict[str, dict[str, Any]]]:
    records = sum(r["records"] for r in results)
    input_bytes = sum(r["input_bytes"] for r in results)
    fields = ("documents", "empty_documents", "sequences", "tokens")
    counts = {k: {**dict.fromkeys(fields, 0), "bytes": 0} for k in keys}
    dropped: dict[str, dict[str, Any]] = {}
    for r in results:
        for k in keys:
            for f in fields:
                counts[k][f] += r["keys"][k].get(f, 0)
        for reason, d in r["dropped"].items():
            agg = dropped.setdefault(reason, {"count": 0, "bytes": 0, "examples": []})
            agg["count"] += d["count"]
            agg["bytes"] += d.get("bytes", 0)
            agg["examples"].extend(d["examples"][: worker.MAX_EXAMPLES - len(agg["examples"])])
    for k in keys:
        counts[k]["bytes"] = counts[k]["tokens"] * itemsize
    order = {r: i for i, r in enumerate(worker.REASONS)}
    dropped = dict(sorted(dropped.items(), key=lambda kv: order.get(kv[0], 99)))
    return records, input_bytes, counts, dropped


def merge_parts(part_prefixes: Sequence[str], output: str, dtype: np.dtype) -> None:
    """Merges partial datasets in order into ``output`` (written under temporary names, renamed)."""
    layout.remove_temporaries(
        os.path.dirname(os.path.abspath(output)), os.path.basename(output) + ".*"
    )
    with storage.IndexedDatasetBuilder(output, dtype=dtype) as b:
        for merged, p in enumerate(part_prefixes):
            pause_point("merge", merged)
            b.merge(p)
        pause_point("merge", len(part_prefixes))


def _dedup_join(
    config: PreprocessConfig,
    wcfg: worker.WorkerConfig,
    plan: Sequence[readers.Partition],
    todo: Sequence[readers.Partition],
    engine: Engine,
) -> dict[str, Any] | None:
    """The deduplication pass and join before tokenizing (skipped when already done).

    Returns the join's statistics (None when every partition was already tokenized).
    """
    assert config.cleaning is not None
    parts = wcfg.parts_dir
    stats = join_lib.read_marker(parts)
    if stats is not None or not todo:
        return stats
    unsigned = [p for p in plan if not sig_lib.is_done(parts, p.index)]
    bar = _ProgressBar(
        sum(p.weight for p in plan),
        sum(p.weight for p in plan if sig_lib.is_done(parts, p.index)),
        config.progress,
        0,
        desc="dedup signatures",
    )
    try:
        engine.run(dataclasses.replace(wcfg, mode=worker.SIGNATURES), unsigned, bar)
    finally:
        bar.close()
    # An engine may run the join itself (Beam); else it runs here, reading the signatures from disk.
    run_join = getattr(engine, "join_duplicates", join_lib.run_join)
    stats = run_join(parts, [p.index for p in plan], config.cleaning)
    logging.info(
        "preprocess: dedup join: %d exact and %d near duplicates of %d records",
        stats["exact_duplicates"],
        stats["near_duplicates"],
        stats["records_signed"],
    )
    return stats


def preprocess(config: PreprocessConfig, engine: Engine | None = None) -> PreprocessResult:
    """Runs (or resumes) preprocessing; see the module docstring.

    Args:
      config: Run settings.
      engine: Where partitions run; default :class:`LocalEngine` with ``config.workers``.

    Returns:
      The run's result (also stored in the manifest).

    Raises:
      readers.InputError: Inputs missing, matching nothing, or in an unknown format.
      tok_lib.TokenizerError: The tokenizer cannot be loaded.
      SettingsMismatchError: The output prefix holds a run with different settings.
      worker.PreprocessDataError: A bad record with ``on_error="fail"``.
    """
    t0 = time.perf_counter()
    files = readers.resolve_inputs(config.input)
    config.tokenizer.check_files()
    if config.split_sentences:
        worker.splitter_for(config.sentence_splitter, config.lang, config.keep_newlines)
    tokenizer = worker.tokenizer_for(config.tokenizer)  # loaded once; reused by in-process workers
    if config.append_eod and tokenizer.eod is None:
        raise tok_lib.TokenizerError(
            f"append_eod=True but tokenizer {config.tokenizer.type} has no end-of-document token"
        )
    dtype = np.dtype(storage.token_dtype_for_vocab(tokenizer.vocab_size))
    out_dir = os.path.dirname(os.path.abspath(config.output_prefix))
    os.makedirs(out_dir, exist_ok=True)
    plan = readers.plan_partitions(files, config.partitions, config.text_mode)
    settings = _settings(config, files, tokenizer, dtype, plan)
    manifest = _prepare(config, settings)
    keys = config.json_keys
    level = config.level
    names = config.output_names()
    parts = layout.parts_dir(config.output_prefix)

    def finished_without_parts() -> bool:
        return all(
            os.path.exists(f"{n}.idx") and os.path.exists(f"{n}.bin") for n in names.values()
        )

    if manifest.get("status") == "complete" and manifest.get("result"):
        prev = manifest["result"]
        if (
            config.keep_parts
            and prev["parts"]
            or not config.keep_parts
            and prev["outputs"]
            and finished_without_parts()
        ):
            if not config.keep_parts:
                shutil.rmtree(parts, ignore_errors=True)
            logging.info("preprocess: %s is already complete", config.output_prefix)
            prev = dict(
                prev, partitions_reused=prev["partitions"], seconds=time.perf_counter() - t0
            )
            return PreprocessResult(**prev)

    os.makedirs(parts, exist_ok=True)
    layout.remove_temporaries(parts)
    wcfg = worker.WorkerConfig(
        tokenizer=config.tokenizer,
        json_keys=keys,
        text_mode=config.text_mode,
        append_eod=config.append_eod,
        split_sentences=config.split_sentences,
        max_document_chars=config.max_document_chars,
        on_error=config.on_error,
        dtype=dtype.name,
        parts_dir=parts,
        level=level,
        drop_empty=config.drop_empty,
        sentence_splitter=config.sentence_splitter,
        lang=config.lang,
        keep_newlines=config.keep_newlines,
        cleaning=config.cleaning,
    )
    done = {
        p.index for p in plan if layout.read_done_marker(parts, p.index, keys, level) is not None
    }
    todo = [p for p in plan if p.index not in done]
    total = sum(p.weight for p in plan)
    bar = _ProgressBar(
        total, sum(p.weight for p in plan if p.index in done), config.progress, config.log_interval
    )
    logging.info(
        "preprocess: %d input files, %d partitions (%d already done), tokenizer %s (vocab %d, %s)",
        len(files),
        len(plan),
        len(done),
        tokenizer.name,
        tokenizer.vocab_size,
        dtype.name,
    )
    engine = engine or LocalEngine(config.workers)
    join_stats = None
    if config.cleaning is not None and config.cleaning.needs_join:
        join_stats = _dedup_join(config, wcfg, plan, todo, engine)
    try:
        engine.run(wcfg, todo, bar)
    finally:
        bar.close()
    results = []
    for p in plan:
        r = layout.read_done_marker(parts, p.index, keys, level)
        if r is None:
            raise RuntimeError(
                f"partition {p.index} did not complete (no valid done marker in {parts})"
            )
        results.append(r)
    part_prefixes = {k: [layout.part_prefix(parts, p.index, k, level) for p in plan] for k in keys}
    if not config.keep_parts:
        for k in keys:
            merge_parts(part_prefixes[k], names[k], dtype)
    records, input_bytes, counts, dropped = _aggregate(results, keys, dtype.itemsize)
    cleaning = None
    if config.cleaning is not None:
        cleaning = report_lib.build(config.cleaning, results, dropped, join_stats)
        json_path, png_path = report_lib.paths(config.output_prefix)
        if config.cleaning.plot and report_lib.plot(cleaning, png_path):
            cleaning["plot"] = png_path
        layout.write_json_atomic(json_path, cleaning)
    result = PreprocessResult(
        outputs={} if config.keep_parts else dict(names),
        parts=dict(part_prefixes) if config.keep_parts else {},
        dtype=dtype.name,
        vocab_size=tokenizer.vocab_size,
        partitions=len(plan),
        partitions_reused=len(done),
        records=records,
        input_bytes=input_bytes,
        keys=counts,
        dropped=dropped,
        seconds=time.perf_counter() - t0,
        cleaning=cleaning,
    )
    manifest = dict(manifest, status="complete", result=result.to_json(), outputs=dict(names))
    layout.write_json_atomic(layout.manifest_path(config.output_prefix), manifest)
    if not config.keep_parts:
        shutil.rmtree(parts, ignore_errors=True)
    logging.info("preprocess: done: %s", ", ".join(result.outputs.values()) or "parts kept")
    return result

"""Preprocessing driver: plan, run partitions on an engine, merge, report — resumable and atomic.

:func:`preprocess` turns raw text into ``{output_prefix}_{key}_{level}.bin/.idx``:

1. Resolve the inputs, load the tokenizer (a missing or unreadable tokenizer file, or inputs matching
   nothing, fail here, before any work), pick the token dtype from the vocabulary size.
2. Cut the inputs into partitions (:func:`jaxblend.preprocess.partitions.plan_partitions`;
   depends on the inputs and ``partitions`` only, never on ``workers``).
3. Check the run manifest (:mod:`jaxblend.preprocess.layout`): same settings → resume; different
   settings → refuse unless ``overwrite``.
4. Process every unfinished partition on the engine: the local process pool (``workers`` processes,
   spawn start method, tokenizer loaded once per process) or Apache Beam
   (:mod:`jaxblend.preprocess.beam`). Each partition writes its partial datasets then its done marker.
5. Merge the parts in partition order into the final datasets (temporary names, then rename) unless
   ``keep_parts``; mark the manifest complete; delete the parts.

The steps live in modules with one job each: the run's settings and result
(:mod:`~jaxblend.preprocess.config`), the run manifest and resuming
(:mod:`~jaxblend.preprocess.manifest`), the engines (:mod:`~jaxblend.preprocess.engines`), merging
and counting (:mod:`~jaxblend.preprocess.merge`), the progress display
(:mod:`~jaxblend.preprocess.progress`); this module runs them in order.

Killed at any point and rerun with the same settings, it redoes only unfinished partitions (and the
merge) and produces byte-identical output, whatever the number of workers.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from absl import logging

from jaxblend import storage
from jaxblend.access import IdentityStoreOptions, ObjectStoreOptions
from jaxblend.preprocess import (
    bucket_input,
    bucket_output,
    chat_records,
    chat_template,
    identity_record,
    layout,
    no_output,
    partitions,
    worker,
)
from jaxblend.preprocess import manifest as manifest_lib
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.preprocess.cleaning import join as join_lib
from jaxblend.preprocess.cleaning import report as report_lib
from jaxblend.preprocess.cleaning import signatures as sig_lib
from jaxblend.preprocess.config import PreprocessConfig, PreprocessResult
from jaxblend.preprocess.engines import Engine, LocalEngine
from jaxblend.preprocess.merge import aggregate, merge_parts
from jaxblend.preprocess.progress import ProgressBar
from jaxblend.urls import is_url


def preprocess(config: PreprocessConfig, engine: Engine | None = None) -> PreprocessResult:
    """Runs (or resumes) preprocessing; see the module docstring. A gs:// or s3:// output prefix is
    built in a local work directory and then published (:mod:`jaxblend.preprocess.bucket_output`).

    Args:
      config: Run settings.
      engine: Where partitions run; default :class:`LocalEngine` with ``config.workers``.

    Returns:
      The run's result (also stored in the manifest).

    Raises:
      partitions.InputError: Inputs missing, matching nothing, or in an unknown format.
      tok_lib.TokenizerError: The tokenizer cannot be loaded.
      SettingsMismatchError: The output prefix holds a run with different settings.
      worker.PreprocessDataError: A bad record with ``on_error="fail"``.
      no_output.NoDocumentsError: An input gave no document (every record dropped, or none).
      ObjectStoreError: Publishing to the bucket failed.
    """
    if is_url(config.output_prefix):
        return _preprocess_to_bucket(config, engine)
    return _preprocess_local(config, engine)


def _preprocess_to_bucket(config: PreprocessConfig, engine: Engine | None) -> PreprocessResult:
    """Builds the run under its local work directory, then publishes it unless the bucket already
    holds exactly this run (its record is the commit point). A bucket prefix holding a run made
    with other settings is refused unless ``overwrite`` (checked after the local build)."""
    if config.keep_parts:
        raise ValueError(
            f"--keep_parts with a bucket --output_prefix {config.output_prefix}: the parts stay in "
            "the local work directory; drop --keep_parts or use a local --output_prefix"
        )
    store = bucket_output.BucketOutput(config.output_prefix, _store_options(config))
    local = bucket_output.local_prefix(config.output_prefix, config.work_dir)
    local_config = dataclasses.replace(config, output_prefix=local)
    logging.info("preprocess: building %s in local work directory %s", config.output_prefix,
                 os.path.dirname(local))
    result = _preprocess_local(local_config, engine)
    url_names = config.output_names()
    manifest = layout.read_json(layout.manifest_path(local))
    record = bucket_output.published_record(manifest, url_names)
    record_url = layout.manifest_path(config.output_prefix)
    remote = store.read_record()
    other = remote is not None and remote.get("settings") != record.get("settings")
    if other and not config.overwrite:
        raise manifest_lib.SettingsMismatchError(
            f"output prefix {config.output_prefix} holds a run made with different settings "
            f"({record_url}); rerun with the original settings, choose another --output_prefix, "
            "or pass --overwrite to replace it"
        )
    if remote == record:
        note = f"{config.output_prefix} is already published (run record {record_url}); nothing uploaded"
    else:
        masks = local_config.loss_mask_names().values()  # --chat: .bin before .idx
        extras = tuple(p for p in report_lib.paths(local) if os.path.exists(p))
        extras += tuple(f"{name}.{ext}" for ext in ("bin", "idx") for name in masks)
        local_names = local_config.output_names()
        generations = store.publish(local_names, record, extras)
        identity_record.record_published(
            url_names, local_names, manifest.get("bin_md5", {}), generations,
            _identity_options(config), store.object_store,
        )
        note = f"published to {config.output_prefix} (.bin, then .idx, then run record {record_url})"
    logging.info("preprocess: %s", note)
    cleaning = result.cleaning
    if cleaning is not None and cleaning.get("plot"):
        cleaning = dict(cleaning, plot=report_lib.paths(config.output_prefix)[1])
    return dataclasses.replace(
        result, outputs=url_names, published=note, cleaning=cleaning,
        loss_masks=config.loss_mask_names(),
    )


def _preprocess_local(config: PreprocessConfig, engine: Engine | None) -> PreprocessResult:
    """:func:`preprocess` into a local output prefix."""
    t0 = time.perf_counter()
    files, tokenizer, dtype = _open_inputs(config)
    os.makedirs(os.path.dirname(os.path.abspath(config.output_prefix)), exist_ok=True)
    plan = partitions.plan_partitions(files, config.partitions, config.text_mode)
    settings = manifest_lib.run_settings(config, files, tokenizer, dtype, plan)
    manifest = manifest_lib.prepare(config, settings)
    parts = layout.parts_dir(config.output_prefix)
    finished = manifest_lib.finished_result(config, manifest)
    if finished is not None:
        if not config.keep_parts:
            shutil.rmtree(parts, ignore_errors=True)
        logging.info("preprocess: %s is already complete", config.output_prefix)
        return dataclasses.replace(
            finished, partitions_reused=finished.partitions, seconds=time.perf_counter() - t0
        )

    os.makedirs(parts, exist_ok=True)
    layout.remove_temporaries(parts)
    wcfg = worker.WorkerConfig(config, dtype.name, parts)
    done = {
        p.index
        for p in plan
        if layout.read_done_marker(parts, p.index, config.part_keys(), config.level) is not None
    }
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
        todo = [p for p in plan if p.index not in done]
        join_stats = _dedup_join(config, wcfg, plan, todo, engine)
    _run_partitions(config, engine, wcfg, plan, done)
    results = _partition_results(config, parts, plan)
    records, input_bytes, counts, dropped = aggregate(results, config.json_keys, dtype.itemsize)
    no_output.check_documents(config, files, results, counts, dropped)  # before publishing
    part_prefixes = _merge_outputs(config, parts, plan, dtype)
    cleaning = _cleaning_report(config, results, dropped, join_stats)
    result = PreprocessResult(
        outputs={} if config.keep_parts else config.output_names(),
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
        tokenizer=tok_spec.facts_of(config.tokenizer, tokenizer).to_json(),
        loss_masks={} if config.keep_parts else config.loss_mask_names(),
    )
    max_ids, md5s = (
        ({}, {}) if config.keep_parts else manifest_lib.scan_outputs(config.output_names(), dtype)
    )
    manifest_lib.mark_complete(config, manifest, result, max_ids, md5s)
    if not config.keep_parts:  # identity known now: no later open reads these `.bin`s again
        identity_record.record_local(
            config.output_names(), md5s, _identity_options(config), _store_options(config)
        )
        shutil.rmtree(parts, ignore_errors=True)
    logging.info("preprocess: done: %s", ", ".join(result.outputs.values()) or "parts kept")
    return result


def _identity_options(config: PreprocessConfig) -> IdentityStoreOptions:
    return config.identity if config.identity is not None else IdentityStoreOptions.from_env()


def _store_options(config: PreprocessConfig) -> ObjectStoreOptions:
    return config.object_store if config.object_store is not None else ObjectStoreOptions.from_env()


def _open_inputs(
    config: PreprocessConfig,
) -> tuple[list[partitions.InputFile], tok_spec.Tokenizer, np.dtype]:
    """Resolves the inputs (downloading gs:// and s3:// objects: :mod:`~jaxblend.preprocess.bucket_input`),
    loads the tokenizer (and sentence splitter) and picks the token dtype, failing before any work
    on a missing input, tokenizer file or end-of-document token."""
    inputs = config.input
    if any(is_url(p) for p in inputs):
        root = bucket_input.mirror_root(config.work_dir)
        inputs = bucket_input.fetch_inputs(inputs, root, _store_options(config))
    files = partitions.resolve_inputs(inputs)
    config.tokenizer.check_files()
    if config.split_sentences:
        worker.splitter_for(config.sentence_splitter, config.lang, config.keep_newlines)
    tokenizer = worker.tokenizer_for(config.tokenizer)  # loaded once; reused by in-process workers
    if config.chat:  # the model directory's chat template: missing or broken fails here
        chat_template.load_chat_template(config.tokenizer.model_file())  # type: ignore[arg-type]
    if config.append_eod and tokenizer.eod is None:
        raise tok_spec.TokenizerError(
            f"append_eod=True but tokenizer {config.tokenizer.type} has no end-of-document token"
        )
    return files, tokenizer, np.dtype(storage.token_dtype_for_vocab(tokenizer.vocab_size))


def _run_partitions(
    config: PreprocessConfig,
    engine: Engine,
    wcfg: worker.WorkerConfig,
    plan: Sequence[partitions.Partition],
    done: set[int],
    desc: str = "preprocess",
) -> None:
    """Runs the partitions not ``done`` on ``engine`` with a progress bar over input bytes (and,
    while tokenizing, log lines)."""
    bar = ProgressBar(
        sum(p.weight for p in plan),
        sum(p.weight for p in plan if p.index in done),
        config.progress,
        config.log_interval if wcfg.mode == worker.TOKENIZE else 0,
        desc,
    )
    try:
        engine.run(wcfg, [p for p in plan if p.index not in done], bar)
    finally:
        bar.close()


def _partition_results(
    config: PreprocessConfig, parts: str, plan: Sequence[partitions.Partition]
) -> list[dict[str, Any]]:
    """Every partition's done-marker result, in plan order.

    Raises:
      RuntimeError: a partition has no valid done marker after the engine returned.
    """
    results = []
    for p in plan:
        r = layout.read_done_marker(parts, p.index, config.part_keys(), config.level)
        if r is None:
            raise RuntimeError(
                f"partition {p.index} did not complete (no valid done marker in {parts})"
            )
        results.append(r)
    return results


def _merge_outputs(
    config: PreprocessConfig, parts: str, plan: Sequence[partitions.Partition], dtype: np.dtype
) -> dict[str, list[str]]:
    """Merges each key's parts in plan order into its final dataset (unless ``keep_parts``);
    returns key -> the part prefixes."""
    part_prefixes = {
        k: [layout.part_prefix(parts, p.index, k, config.level) for p in plan]
        for k in config.part_keys()
    }
    if not config.keep_parts:  # --chat: the loss masks too, beside the run record
        masks = {chat_records.mask_key(k): name for k, name in config.loss_mask_names().items()}
        for k, name in {**config.output_names(), **masks}.items():
            os.makedirs(os.path.dirname(os.path.abspath(name)), exist_ok=True)
            merge_parts(part_prefixes[k], name, chat_records.MASK_DTYPE if k in masks else dtype)
    return {k: part_prefixes[k] for k in config.json_keys}


def _cleaning_report(
    config: PreprocessConfig,
    results: Sequence[dict[str, Any]],
    dropped: dict[str, dict[str, Any]],
    join_stats: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """Builds and writes the cleaning report (JSON, the plot if asked); None without cleaning."""
    if config.cleaning is None:
        return None
    cleaning = report_lib.build(config.cleaning, results, dropped, join_stats)
    json_path, png_path = report_lib.paths(config.output_prefix)
    if config.cleaning.plot and report_lib.plot(cleaning, png_path):
        cleaning["plot"] = png_path
    layout.write_json_atomic(json_path, cleaning)
    return cleaning


def _dedup_join(
    config: PreprocessConfig,
    wcfg: worker.WorkerConfig,
    plan: Sequence[partitions.Partition],
    todo: Sequence[partitions.Partition],
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
    signed = {p.index for p in plan if sig_lib.is_done(parts, p.index)}
    signing = dataclasses.replace(wcfg, mode=worker.SIGNATURES)
    _run_partitions(config, engine, signing, plan, signed, "dedup signatures")
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

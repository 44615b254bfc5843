"""`inspect preflight`: check a data configuration before training, without building anything.

Reports per split and dataset: tokens, requested samples, epochs, samples and index-map bytes;
the total index-map memory/disk; whether the maps are cached (with a bucket cache: and published,
what training starts from); token-dtype limits against the
vocabulary; the number of distinct batch shapes of the step plan (a batch-size ramp-up has one per
size); with `--packing=best_fit`, each dataset's split documents, rows and padding (its first
epoch packed in memory). Problems (missing or corrupt files, splits without tokens asked for samples, a
vocabulary the token dtype cannot hold, maps above the memory limit) are listed and make the
command exit non-zero. Warnings (a training dataset shorter than one sequence, or repeated more
than `--warn_epochs` epochs: `jaxblend.cli.data_warnings`) are listed as `WARNING:` lines and the
last line then says `preflight: ok, with N warning(s)`, never a bare `ok`.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.cli.data_warnings import training_data_warnings
from jaxblend.sampling import StepPlan
from jaxblend.tokenizer_facts import TokenizerFacts, TokenizerMismatchError, check_ids


@dataclasses.dataclass(frozen=True)
class TokenizerCheck:
    """What the preflight knows of the datasets' tokenizer.

    Attributes:
      facts: prefix -> the recorded (or `--tokenizer_type`) facts of each dataset that has them.
      eod_id: the EOD id the run uses (None: none).
      pad_id: the pad id the run uses (None: none).
      mixed: the one-line refusal of a blend of different tokenizers, or None.
    """

    facts: dict[str, TokenizerFacts] = dataclasses.field(default_factory=dict)
    eod_id: int | None = None
    pad_id: int | None = None
    mixed: str | None = None


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _sizes(sizes: list[int]) -> str:
    """`8, 16, 24` or, for long lists, `8, 16, ..., 1536`."""
    if len(sizes) <= 6:
        return ", ".join(map(str, sizes))
    return f"{sizes[0]}, {sizes[1]}, ..., {sizes[-1]}"


def run(
    config: index.GPTDataConfig,
    access: DataAccess,
    plan: StepPlan,
    vocab_size: int | None,
    max_gb: float,
    tokenizer: TokenizerCheck,
    warn_epochs: int,
) -> dict:
    """Runs the preflight and prints its report; returns it as a dict (with `problems`).

    Args:
      config: the data configuration checked (the one training assembles from the same flags:
        `jaxblend.cli.assembly`, so "cached" means training loads the maps without building).
      access: where and how the datasets and their cached maps are reached.
      plan: the training step plan (`--train_iters` steps; its batch shapes are reported).
      vocab_size: the tokenizer's vocabulary, checked against the token dtypes.
      max_gb: index-map size above which the preflight fails.
      tokenizer: the datasets' tokenizer facts and the ids the run uses: a blend of different
        tokenizers, ids outside the vocabulary and data holding ids >= `vocab_size` are problems.
      warn_epochs: a training dataset repeated more epochs than this is a warning (0: never).
    """
    from jaxblend.index.estimate import estimate_plan
    from jaxblend.map_store import data_maps_status, publication
    from jaxblend.opening import dataset_info
    from jaxblend.storage import IndexedDataset

    problems: list[str] = []
    datasets: dict[str, IndexedDataset] = {}

    def info(prefix: str):
        if prefix not in datasets:
            datasets[prefix] = IndexedDataset(prefix, access=access)
        return dataset_info(datasets[prefix], prefix)

    try:
        estimate = estimate_plan(config, info)
    except (ValueError, OSError) as err:
        print(f"PROBLEM: {err}")
        return {"problems": [str(err)]}
    problems += estimate.problems
    status = data_maps_status(estimate.fingerprint, estimate.specs, access)
    problems += status.problems
    cached = status.cached
    if cached and publication.applies(access):  # a bucket: training starts from the record
        try:
            published = publication.read(config, access) is not None
        except ValueError as err:
            problems.append(str(err))
            published = False
        if not published:
            cached = False
            print("index maps cached but not published: training's first process publishes "
                  "them (python -m jaxblend.tools.build_index does it ahead)")

    print(f"index maps {estimate.fingerprint}: "
          f"{'cached at ' + str(status.where) if cached else 'not cached (will be built)'}")
    print(f"{'split':<6} {'dataset':<34} {'tokens':>14} {'requested':>11} {'epochs':>6} {'samples':>12} {'maps':>10}")
    for e in estimate.datasets:
        print(f"{e.split:<6} {os.path.basename(e.prefix)[-34:]:<34} {e.tokens:>14,} "
              f"{'None' if e.requested is None else format(e.requested, ','):>11} {e.epochs:>6} "
              f"{e.samples:>12,} {_human(e.bytes):>10}")
    for split, size in estimate.blend_sizes.items():
        print(f"blend {split}: {size:,} samples")
    if estimate.packing:
        overflow = {"cut": "", "truncate": ", longer documents truncated",
                    "drop": ", longer documents dropped"}[config.packing_overflow]
        print(f"packing {config.packing} (window {config.packing_window:,} documents{overflow}), "
              "first epoch of each dataset:")
        print(f"{'split':<6} {'dataset':<34} {'documents':>11} {'split docs':>10} "
              f"{'rows':>11} {'padding':>9}")
        for p in estimate.packing:
            print(f"{p.split:<6} {os.path.basename(p.prefix)[-34:]:<34} {p.documents:>11,} "
                  f"{p.split_documents:>10,} {p.rows:>11,} {100 * p.padding_fraction:>8.2f}%")
    print(f"index maps in total: {_human(estimate.total_bytes)} (memory-mapped from "
          f"{access.maps.location or 'memory: no --data_cache_path'})")
    if estimate.total_bytes > max_gb * 2**30:
        problems.append(f"index maps need {_human(estimate.total_bytes)} > --max_index_gb={max_gb}")
    if access.maps.location is None:
        print("note: no --data_cache_path: every process rebuilds the maps at start")
    for prefix, ds in datasets.items():
        limit = np.iinfo(ds.dtype).max if ds.dtype.kind in "iu" else None
        line = f"{os.path.basename(prefix)}: tokens {ds.dtype}"
        if vocab_size is not None and limit is not None:
            line += f" (holds ids <= {limit:,}; vocabulary {vocab_size:,})"
            if vocab_size - 1 > limit:
                problems.append(f"{prefix}: token dtype {ds.dtype} cannot hold vocabulary {vocab_size}")
        if prefix in tokenizer.facts:
            line += f"; tokenizer {tokenizer.facts[prefix].describe()}"
        print(line)
    if tokenizer.mixed:
        problems.append(tokenizer.mixed)
    if vocab_size is not None:
        try:
            check_ids(
                vocab_size, tokenizer.eod_id, tokenizer.pad_id, tokenizer.facts, access, log=print
            )
        except TokenizerMismatchError as err:
            problems.append(str(err))
    train_epochs = {e.prefix: e.epochs for e in estimate.datasets if e.split == "train"}
    repeated = {p: n for p, n in train_epochs.items() if n > 1}
    if repeated:
        print("datasets repeated in training: " + ", ".join(f"{os.path.basename(p)} x{n}" for p, n in repeated.items()))
    shapes = sorted(shape.rows for shape in plan.batch_shapes())
    print(f"batch shapes: {len(shapes)} (one compiled train step each; global batch sizes "
          f"{_sizes(shapes)})")
    warnings = training_data_warnings(estimate.datasets, config.seq_length, warn_epochs)
    for w in warnings:
        print(f"WARNING: {w}")
    for p in problems:
        print(f"PROBLEM: {p}")
    print("preflight: " + ("FAILED" if problems else "ok" + _with_warnings(len(warnings))))
    return {
        "fingerprint": estimate.fingerprint, "cached": cached,
        "total_bytes": estimate.total_bytes, "blend_sizes": estimate.blend_sizes,
        "datasets": [dataclasses.asdict(e) for e in estimate.datasets], "problems": problems,
        "warnings": warnings, "batch_shapes": len(shapes),
        "packing": [
            {**dataclasses.asdict(p), "padding_fraction": p.padding_fraction}
            for p in estimate.packing
        ],
    }


def _with_warnings(count: int) -> str:
    """`, with 2 warnings (WARNING lines above)` after `ok` ('' without warnings)."""
    if not count:
        return ""
    return f", with {count} warning{'s' * (count > 1)} (WARNING lines above)"

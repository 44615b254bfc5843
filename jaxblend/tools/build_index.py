r"""Builds (or verifies) the cached index maps of a data configuration ahead of training.

  python -m jaxblend.tools.build_index --data_path="30 /d/a 70 /d/b" --split=969,30,1 \
      --seq_length=2048 --train_samples=25600000 --valid_samples=25600 --test_samples=0 \
      --data_cache_path=/data/index_cache

It takes the training job's data and step-plan flags (`--global_batch_size`,
`--rampup_batch_size`, `--step_batch_size_schedule`, `--train_iters`, `--eval_interval`,
`--eval_iters`): the sample counts not given by `--train_samples`, `--valid_samples` and
`--test_samples` derive from them exactly as in training (`jaxblend.cli.steps`), so the maps it
builds are the ones training loads. With `--data_schedule=sched.json` (docs/schedules.md) the
train split is the staged blend of the schedule's stages, its steps turned into samples by the
same step plan.

Run it once per cache location (on each pod host with a local cache, or once for a shared
filesystem) so the training job starts by memory-mapping the maps. Prints, per split, its size,
the samples it draws from each dataset (the dataset's share of the split) and, apart, the samples
each dataset holds (all its epochs, of which the split draws its share); a second run finds the cache, verifies every byte of it
against the manifest's SHA-256 (a corrupt entry is rebuilt) and only loads it.

With a bucket `--data_cache_path` (gs://, s3://) it also publishes what training hosts start from
(`jaxblend.map_store.publication`): each split's row table, then the small publication record, and
prints the record's URL (`published: gs://.../published/<key>.json`, or `already published:` when
the bucket holds it for the same data: nothing is rewritten). Run it again after changing a
dataset: it publishes anew.

The training job's flagfile works as it is (`--flagfile=run.flags`): the flags of
`jaxblend.train` this tool does not use (model, optimizer, run, ...) are ignored, with one note
line naming them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import numpy as np
from absl import app

from jaxblend import cli
from jaxblend.cli import data_flags
from jaxblend.index import SplitMaps
from jaxblend.map_store import open_and_load_data_maps, publication
from jaxblend.tools import _training_flags


def drawn_per_dataset(split: SplitMaps) -> np.ndarray:
    """How many of the split's samples come from each dataset (the blend's draws)."""
    if split.dataset_index is None:  # one dataset, not blended: every sample is its own
        return np.array([len(split)], dtype=np.int64)
    return np.bincount(split.dataset_index, minlength=split.num_datasets).astype(np.int64)


def split_summary(name: str, split: SplitMaps | None) -> str:
    """One line per split: its samples, each dataset's share of them, each dataset's own size."""
    if split is None:
        return f"  {name}: none"
    drawn = drawn_per_dataset(split)
    names = [os.path.basename(n) for n in split.dataset_names]
    total = max(len(split), 1)
    shares = ", ".join(
        f"{n} {int(d):,} ({100 * int(d) / total:.1f}%)" for n, d in zip(names, drawn)
    )
    own = ", ".join(f"{n} {split.dataset_length(j):,}" for j, n in enumerate(names))
    return (
        f"  {name}: {len(split):,} samples; drawn from each dataset (share of the split): {shares}; "
        f"samples each dataset holds: {own}"
    )


def main(argv: Sequence[str]) -> None:
    run = cli.run_config_from_flags()
    config = run.config
    # A cached entry is checked byte for byte here (training starts check only a summary).
    access = run.access.with_maps(verify="full")
    if access.maps.location is None:
        raise app.UsageError("--data_cache_path is required: build_index fills a cache")
    began = time.perf_counter()
    datasets, plan = open_and_load_data_maps(config, access)
    seconds = time.perf_counter() - began
    print(f"index maps {plan.fingerprint} at {plan.cache_path} ({seconds:.2f} s)")
    for name in ("train", "valid", "test"):
        print(split_summary(name, plan.split(name)))
    if publication.applies(access):
        done = publication.publish_plan(config, datasets, plan, access)
        state = "published" if done.written else "already published"
        print(f"{state}: {done.url}")


def define_flags() -> None:
    """The data flags and the step-plan flags (the sample counts not given, and the samples of
    `--data_schedule`'s steps, derive from them as in training)."""
    data_flags.define_data_flags()
    cli.define_step_plan_flags()


run = _training_flags.data_tool_run(main, define_flags)


if __name__ == "__main__":
    sys.exit(run())

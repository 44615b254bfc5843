r"""Dumps a data configuration's index maps and first samples, to compare with Megatron-LM.

Writes `<out>/<split>.npz` for each split that exists, holding `dataset_index` and
`dataset_sample_index` (blends only), `ds{j}_document_index`, `ds{j}_sample_index`,
`ds{j}_shuffle_index` for each constituent dataset j (Megatron's dtypes), and `samples_text`
(int64 `[num, seq_length + extra]`, the raw token window of each of the first `num` samples,
padded with -1). With `--decode`, also `<out>/<split>.decoded.json`: the text of each of those
samples (a list, row i = `samples_text` row i), decoded with the tokenizer recorded with the data
(`jaxblend.decode`; `--tokenizer_type` & co. for Megatron-made data); the tokens a conversation's
stored loss mask does not train show inside ⟦ ⟧, as with `inspect explain --decode`. A blend of datasets made
with different tokenizers (their preprocessing records say so) is refused unless
`--allow_mixed_tokenizers`. Flags are named after Megatron-LM's (its dashed, space-separated
spellings are accepted as well):

  python -m jaxblend.tools.dump_samples --data_path="30 /d/a 70 /d/b" --split=969,30,1 \
      --seq_length=2048 --seed=1234 --train_samples=100000 --valid_samples=1000 \
      --test_samples=100 --num=16 --out=/tmp/dump

With `--data_schedule=sched.json` (docs/schedules.md) the train split is the schedule's staged
blend, and its `.npz` holds each dataset's maps per epoch its stages draw,
`ds{j}_epoch{e}_document_index` & co. (epoch 0 is Megatron's one-epoch map); give the training
job's `--global_batch_size` (or `--rampup_batch_size` / `--step_batch_size_schedule`), which turns
the stages' steps into samples. Sample counts not given by `--train_samples`, `--valid_samples`,
`--test_samples` derive from the step-plan flags as in training (`jaxblend.cli.steps`).
With `--packing=best_fit` each dataset's packed rows take the place of its maps:
`ds{j}_packed_starts`, `ds{j}_packed_sequence`, `ds{j}_packed_offset`, `ds{j}_packed_length`,
`ds{j}_packed_order` (sample q is row `order[q]`) and `ds{j}_packed_epoch_rows` (docs/format.md,
"Packed maps").

The training job's flagfile works as it is (`--flagfile=run.flags`): the flags of
`jaxblend.train` this tool does not use (model, optimizer, run, ...) are ignored, with one note
line naming them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
from absl import app, flags, logging

from jaxblend import atomic_write, cli, decode, index
from jaxblend.access import DataAccess
from jaxblend.cli import data_flags, tool_flags
from jaxblend.map_store import open_and_load_data_maps
from jaxblend.tools import _own_process, _training_flags


def define_flags() -> None:
    """The data flags, the step-plan flags (sample counts, steps of `--data_schedule` -> samples),
    the tokenizer flags, `--num`, `--out` and `--decode`."""
    data_flags.define_data_flags()
    cli.define_step_plan_flags()
    cli.define_tokenizer_flags()
    tool_flags.define_dump_samples_flags()
    tool_flags.define_decode_flags()


def split_arrays(split_maps: index.SplitMaps, datasets: dict, num: int) -> dict[str, np.ndarray]:
    """The arrays of one split's .npz file."""
    out: dict[str, np.ndarray] = {}
    if split_maps.is_blended:
        out["dataset_index"] = np.asarray(split_maps.dataset_index)
        out["dataset_sample_index"] = np.asarray(split_maps.dataset_sample_index)
    for j in range(split_maps.num_datasets):
        if split_maps.is_packed:  # packed rows, not Megatron's maps
            rows = split_maps.dataset_rows(j)
            for field in ("starts", "sequence", "offset", "length", "order", "epoch_rows"):
                out[f"ds{j}_packed_{field}"] = np.asarray(getattr(rows, field))
        elif split_maps.is_staged:  # one-epoch maps, one set per epoch the stages draw
            for e in range(split_maps.dataset_epochs(j)):
                _put_maps(out, f"ds{j}_epoch{e}_", split_maps.constituent(j, epoch=e))
        else:
            _put_maps(out, f"ds{j}_", split_maps.constituent(j))
    out["samples_text"] = _windows(split_maps, datasets, min(num, len(split_maps)), -1)
    return out


def _windows(
    split_maps: index.SplitMaps, datasets: dict, count: int, fill: int, missing: int | None = None
) -> np.ndarray:
    """int64 `[count, window]`: the first `count` samples read piece by piece from `datasets` (by
    name), `fill` past each row's pieces; a dataset not in `datasets` reads as `missing` (None:
    every dataset is there)."""
    text = np.full((count, split_maps.window), fill, dtype=np.int64)
    spans = split_maps.spans(np.arange(count, dtype=np.int64))
    filled = np.zeros(count, dtype=np.int64)
    for r, d, q, o, n in zip(spans.row, spans.dataset, spans.sequence, spans.offset, spans.length):
        dataset = datasets.get(split_maps.dataset_names[int(d)])
        if dataset is None and missing is not None:
            text[r, filled[r] : filled[r] + int(n)] = missing
        else:
            text[r, filled[r] : filled[r] + int(n)] = dataset.get(int(q), offset=int(o), length=int(n))
        filled[r] += int(n)
    return text


def _put_maps(out: dict[str, np.ndarray], key: str, maps: index.GPTIndexMaps) -> None:
    out[f"{key}document_index"] = np.asarray(maps.document_index)
    out[f"{key}sample_index"] = np.asarray(maps.sample_index)
    out[f"{key}shuffle_index"] = np.asarray(maps.shuffle_index)


def decoded_rows(samples_text: np.ndarray, decoder, weights: np.ndarray | None = None) -> list[str]:
    """The text of each row of a ``samples_text`` array (its -1 padding left out); with the
    stored loss ``weights`` of its tokens (conversations), the untrained text marked as
    `inspect explain --decode` marks it (`jaxblend.decode.NOT_TRAINED`)."""
    return [
        decoder.detokenize(row[row >= 0], None if weights is None else weights[r][row >= 0])
        for r, row in enumerate(samples_text)
    ]


def dump(
    config: index.GPTDataConfig, out_dir: str, num: int, access: DataAccess, decoder=None
) -> list[str]:
    """Builds the plan of `config` and writes one .npz per existing split; returns the paths.

    `access` says how data and the map store are reached; with a ``decoder`` (a tokenizer), each
    split's samples are also written as text to ``<split>.decoded.json``.
    """
    datasets, plan = open_and_load_data_maps(config, access)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for name in ("train", "valid", "test"):
        split_maps = plan.split(name)
        if split_maps is None:
            continue
        path = os.path.join(out_dir, f"{name}.npz")
        arrays = split_arrays(split_maps, datasets, num)
        with atomic_write.atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, **arrays)
        written.append(path)
        if decoder is not None:
            text_path = os.path.join(out_dir, f"{name}.decoded.json")
            masks = decode.open_loss_masks(split_maps.dataset_names, access)
            weights = None if not masks else _windows(
                split_maps, masks, len(arrays["samples_text"]), 0, missing=1
            )
            with atomic_write.atomic_file(text_path, "w", encoding="utf-8") as f:
                json.dump(decoded_rows(arrays["samples_text"], decoder, weights), f, indent=1,
                          ensure_ascii=False)
            written.append(text_path)
        logging.info(
            "%s: %d samples, %d datasets -> %s", name, len(split_maps), split_maps.num_datasets, path
        )
    return written


def main(argv: Sequence[str]) -> None:
    fl = flags.FLAGS
    if not fl.out:
        raise app.UsageError("--out is required")
    # The tokenizer step refuses a blend of different tokenizers.
    run = cli.run_config_from_flags(tokenizer=cli.run_tokenizer_from_flags)
    config, access = run.config, run.access
    decoder = cli.decoder_from_flags(index.config_prefixes(config), access) if fl.decode else None
    dump(config, fl.out, fl.num, access, decoder)


run = _training_flags.data_tool_run(main, define_flags)


if __name__ == "__main__":
    _own_process.exit_now(run())

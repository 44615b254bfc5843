"""Per-dataset loss, tokens and samples of the training example.

Every row of a batch comes from one dataset of its split (the batch's `dataset_ids` index the
split's `dataset_names`). `batch_sums` turns a batch's per-token losses and loss mask into, per
dataset, the summed token loss, the loss tokens (positions with `loss_mask` 1) and the rows.

Training keeps these sums on the device: the train step adds its batch's sums into a
`DatasetSums` it receives and returns (`DeviceWindow` holds it between steps), so nothing is read
by the host between log lines. The host reads the window where the loop reads anyway (log lines,
evaluations, checkpoints); the int32 counters also get read before they could overflow (a window
of more than 2**31 - 1 batch positions), which needs a log interval of billions of tokens.

`RunTotals` keeps on the host, per dataset, the tokens and samples consumed since the start of the
run (step 0, across resumes: saved in and restored from the checkpoint's metadata, by dataset
name) and the loss sums since the last log line. `dataset_line` and `validation_part` render them
for the log: every dataset when there are few, else the datasets with the most tokens and one
"others" entry; `train_record`/`validation_record` give every dataset, for `--metrics_jsonl`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

INT32_LIMIT = 2**31 - 1


class DatasetSums(NamedTuple):
    """Per-dataset sums (a pytree: device arrays in the step, numpy arrays on the host).

    Attributes:
      loss: float32 [D], the summed loss of the dataset's loss tokens.
      tokens: int32 [D], the dataset's loss tokens (positions with `loss_mask` 1).
      samples: int32 [D], the dataset's rows.
    """

    loss: jax.Array
    tokens: jax.Array
    samples: jax.Array


def zeros(num_datasets: int) -> DatasetSums:
    """Sums of nothing, for `num_datasets` datasets."""
    return DatasetSums(
        jnp.zeros(num_datasets, jnp.float32), jnp.zeros(num_datasets, jnp.int32),
        jnp.zeros(num_datasets, jnp.int32),
    )


def batch_sums(token_loss, loss_mask, dataset_ids, num_datasets: int) -> DatasetSums:
    """Per-dataset sums of one batch (traceable inside a jitted step).

    Args:
      token_loss: [B, S] loss of every position (before masking).
      loss_mask: [B, S] 1 where the position counts, else 0.
      dataset_ids: [B] the dataset of every row, in [0, num_datasets).
      num_datasets: datasets of the split.
    """
    mask = loss_mask.astype(jnp.float32)
    row_loss = jnp.sum(token_loss.astype(jnp.float32) * mask, axis=1)
    row_tokens = jnp.round(jnp.sum(mask, axis=1)).astype(jnp.int32)
    ids = dataset_ids.astype(jnp.int32)
    return DatasetSums(
        jax.ops.segment_sum(row_loss, ids, num_segments=num_datasets),
        jax.ops.segment_sum(row_tokens, ids, num_segments=num_datasets),
        jnp.bincount(ids, length=num_datasets).astype(jnp.int32),
    )


def add(a: DatasetSums, b: DatasetSums) -> DatasetSums:
    """Elementwise sum of two `DatasetSums`."""
    return DatasetSums(*(x + y for x, y in zip(a, b, strict=True)))


class DeviceWindow:
    """The training steps' per-dataset sums since the host last read them, kept on the device.

    Args:
      num_datasets: datasets of the training split.
      sharding: where the sums live (replicated over the mesh, so every process can read them).
    """

    def __init__(self, num_datasets: int, sharding) -> None:
        self._zeros = jax.jit(lambda: zeros(num_datasets), out_shardings=sharding)
        self.sums = self._zeros()
        self._positions = 0

    def must_read_before(self, positions: int) -> bool:
        """Whether adding a batch of `positions` (rows x sequence length) could overflow."""
        return self._positions + positions > INT32_LIMIT

    def added(self, sums: DatasetSums, positions: int) -> None:
        """Keeps the sums a step returned (its input sums plus a batch of `positions`)."""
        self.sums = sums
        self._positions += positions

    def take(self) -> DatasetSums:
        """Reads the sums to the host (numpy) and starts a new window."""
        host = DatasetSums(*(np.asarray(x) for x in jax.device_get(tuple(self.sums))))
        self.sums = self._zeros()
        self._positions = 0
        return host


@dataclasses.dataclass
class RunTotals:
    """Per-dataset figures of a run, on the host.

    Attributes:
      names: the training split's datasets (index = dataset id).
      tokens: int64 [D] loss tokens consumed since step 0 of the run (across resumes).
      samples: int64 [D] samples consumed since step 0.
      window_loss: float64 [D] summed loss since the last log line.
      window_tokens: int64 [D] loss tokens since the last log line.
      carried: figures of the checkpoint for datasets outside this split (kept for the next save).
      note: why restored figures are incomplete (an older checkpoint), or None.
    """

    names: tuple[str, ...]
    tokens: np.ndarray
    samples: np.ndarray
    window_loss: np.ndarray
    window_tokens: np.ndarray
    carried: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    note: str | None = None

    @classmethod
    def restored(
        cls, names: Sequence[str], meta: dict | None, same_stream: bool = False
    ) -> RunTotals:
        """The totals at the start of a run: zeros, or the figures a checkpoint's `meta` holds.

        Checkpoints record every dataset by name (`per_dataset`, and `dataset_order`: the split's
        datasets by id), so a resumed run whose split gained datasets starts those at 0 and keeps
        the figures of datasets it no longer reads. With `same_stream` (the run continues the
        checkpoint's data stream: its loader state was accepted), dataset j of the split is the
        data the checkpoint counted as its dataset j, so a dataset whose name the checkpoint does
        not know takes the figures of the checkpoint's dataset at its position when that name is
        gone from the split: the same dataset reached by another path (moved to a bucket).
        Older checkpoints hold only `samples_per_dataset` (a list in dataset order): samples are
        restored when the list fits, tokens then count from the resume step (`note` says so).

        Args:
          names: the split's datasets (index = dataset id).
          meta: the checkpoint's metadata, or None (a fresh run).
          same_stream: whether the run continues the checkpoint's data stream.
        """
        d = len(names)
        totals = cls(
            tuple(names), np.zeros(d, np.int64), np.zeros(d, np.int64), np.zeros(d, np.float64),
            np.zeros(d, np.int64),
        )
        if not meta:
            return totals
        per_dataset = meta.get("per_dataset")
        if isinstance(per_dataset, dict):
            index = {n: j for j, n in enumerate(totals.names)}
            if same_stream:
                order = meta.get("dataset_order") or []
                for j, (old, new) in enumerate(zip(order, totals.names, strict=False)):
                    if new not in per_dataset and old not in index and old in per_dataset:
                        index[old] = j  # the same dataset under another name
            for name, figures in per_dataset.items():
                if name in index:
                    totals.tokens[index[name]] = int(figures["tokens"])
                    totals.samples[index[name]] = int(figures["samples"])
                else:
                    totals.carried[name] = {
                        "tokens": int(figures["tokens"]), "samples": int(figures["samples"])
                    }
            return totals
        old = meta.get("samples_per_dataset")
        if old is not None and len(old) == d:
            totals.samples[:] = np.asarray(old, np.int64)
            totals.note = "the checkpoint holds no per-dataset tokens: tokens count from the resume step"
        else:
            totals.note = "the checkpoint holds no per-dataset figures: they count from the resume step"
        return totals

    def absorb(self, sums: DatasetSums) -> None:
        """Adds a window's sums (numpy) read from the device."""
        self.window_loss += np.asarray(sums.loss, np.float64)
        self.window_tokens += np.asarray(sums.tokens, np.int64)
        self.tokens += np.asarray(sums.tokens, np.int64)
        self.samples += np.asarray(sums.samples, np.int64)

    def window_means(self) -> np.ndarray:
        """Mean loss per dataset since the last log line (NaN where it had no tokens)."""
        return _means(self.window_loss, self.window_tokens)

    def end_window(self) -> None:
        """Starts the next log line's window."""
        self.window_loss[:] = 0.0
        self.window_tokens[:] = 0

    def meta(self) -> dict:
        """The checkpoint metadata entries that `restored` reads back."""
        per_dataset = dict(self.carried)
        for j, name in enumerate(self.names):
            per_dataset[name] = {"tokens": int(self.tokens[j]), "samples": int(self.samples[j])}
        return {"samples_per_dataset": self.samples.tolist(), "per_dataset": per_dataset,
                "dataset_order": list(self.names)}


def _means(loss: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tokens > 0, loss / np.maximum(tokens, 1), np.nan)


def short_names(names: Sequence[str]) -> list[str]:
    """Display names: each prefix's base name, the whole prefix where base names collide."""
    base = [os.path.basename(n.rstrip("/")) or n for n in names]
    twice = {b for b in base if base.count(b) > 1}
    return [n if b in twice else b for n, b in zip(names, base, strict=True)]


def shown(tokens: np.ndarray, top: int) -> tuple[list[int], list[int]]:
    """(datasets shown one by one, datasets folded into "others"): every dataset when there are
    at most `top` (or `top` is 0), else the `top` - 1 with the most tokens (ties: lower id) and
    the rest as one entry, so a line never holds more than `top` entries."""
    d = len(tokens)
    if top <= 0 or d <= top:
        return list(range(d)), []
    order = sorted(range(d), key=lambda j: (-int(tokens[j]), j))
    return sorted(order[: top - 1]), sorted(order[top - 1:])


def _loss(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.4f}"


def _loss_entries(
    names: Sequence[str], loss: np.ndarray, tokens: np.ndarray, top: int,
    total: np.ndarray | None = None,
) -> str:
    """`name loss L | ...`: the mean loss (`loss` over `tokens`) of the datasets `shown` one by
    one and of the others together; with `total`, ranked by it and each entry with
    `tokens T` of it."""
    short = short_names(names)
    one, rest = shown(tokens if total is None else total, top)
    groups = [([j], short[j]) for j in one] + ([(rest, f"others ({len(rest)})")] if rest else [])
    parts = []
    for ids, label in groups:
        mean = _means(loss[ids].sum(keepdims=True), tokens[ids].sum(keepdims=True))[0]
        tail = "" if total is None else f" tokens {int(total[ids].sum()):,}"
        parts.append(f"{label} loss {_loss(mean)}{tail}")
    return " | ".join(parts)


def dataset_line(step: int, totals: RunTotals, top: int) -> str:
    """The per-dataset log line: mean loss since the last line, tokens since step 0.

    `step    20  datasets: code loss 2.1034 tokens 40,960 | prose loss - tokens 0 | others (7)
    loss 2.4410 tokens 81,920`; `loss -` marks a dataset that had no tokens since the last line.
    """
    entries = _loss_entries(
        totals.names, totals.window_loss, totals.window_tokens, top, totals.tokens
    )
    return f"step {step:5d}  datasets: {entries}"


def stage_line(
    step: int, index: int, count: int, blend: Sequence[str], top: int, resumed: bool = False
) -> str:
    """The line printed when a stage of a data schedule begins (or a run resumes inside it),
    its weights in percent: `step    10  stage 1 of 3 begins: code 20.0% | prose 30.0% |
    legal 50.0%` (stages count from 0, as in `--data_schedule` messages; the `top` - 1 heaviest
    one by one and the rest as `others (N)` when there are more than `top`).
    """
    from jaxblend.index import BlendStage

    stage = BlendStage(0, tuple(blend))
    weights = np.asarray(stage.weights(), np.float64)
    names = short_names(stage.parsed.prefixes)
    one, rest = shown(np.round(weights * 1e9).astype(np.int64), top)
    parts = [f"{names[j]} {100 * weights[j]:.1f}%" for j in one]
    if rest:
        parts.append(f"others ({len(rest)}) {100 * weights[rest].sum():.1f}%")
    verb = "continues" if resumed else "begins"
    return f"step {step:5d}  stage {index} of {count} {verb}: " + " | ".join(parts)


def validation_part(names: Sequence[str], sums: DatasetSums, top: int) -> str:
    """The per-dataset losses of a validation pass: `datasets: a loss 2.1 | b loss 2.3`."""
    tokens = np.asarray(sums.tokens, np.int64)
    return "datasets: " + _loss_entries(names, np.asarray(sums.loss, np.float64), tokens, top)


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def train_record(step: int, figures: dict, totals: RunTotals) -> dict:
    """A `--metrics_jsonl` record of a log line: the line's `figures` and every dataset's."""
    means = totals.window_means()
    datasets = {
        name: {
            "loss": _number(means[j]), "loss_tokens": int(totals.window_tokens[j]),
            "tokens": int(totals.tokens[j]), "samples": int(totals.samples[j]),
        }
        for j, name in enumerate(totals.names)
    }
    return {"kind": "train", "step": step, **figures, "datasets": datasets}


def validation_record(
    step: int, label: str, loss: float, names: Sequence[str], sums: DatasetSums
) -> dict:
    """A `--metrics_jsonl` record of one validation set's pass."""
    tokens = np.asarray(sums.tokens, np.int64)
    means = _means(np.asarray(sums.loss, np.float64), tokens)
    datasets = {
        name: {"loss": _number(means[j]), "tokens": int(tokens[j])} for j, name in enumerate(names)
    }
    return {"kind": "validation", "step": step, "set": label, "loss": _number(loss),
            "datasets": datasets}

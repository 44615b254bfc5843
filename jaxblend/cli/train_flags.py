"""Flags of the training example (`jaxblend.train`) and its `TrainSettings`.

The model, optimizer, schedule, logging, evaluation, checkpointing and built-in corpus settings;
the data, schema, source, mesh, step-plan, loader and distributed flags come from their groups.
"""

from __future__ import annotations

import dataclasses
import os

from absl import flags

from jaxblend.cli import flag_help


def define_train_flags() -> None:
    """Defines the training example's own flags (`--train_iters`, `--eval_interval` and
    `--eval_iters` are step-plan flags: `define_step_plan_flags`)."""
    with flag_help.group(flag_help.DATA):
        flags.DEFINE_float(
            "default_corpus_mb", 6.0,
            "Without data flags: size cap of each built-in corpus dataset (MB).",
            lower_bound=0.001,
        )
        flags.DEFINE_list(
            "default_corpus_weights", ["50", "30", "20"],
            "Without data flags: blend weights of the built-in corpus's code, prose, legal.",
        )
    with flag_help.group(flag_help.MODEL):
        flags.DEFINE_integer(
            "vocab_size", None,
            "Model vocabulary (default: the vocabulary recorded with the datasets by "
            "jaxblend.tools.preprocess, or of --tokenizer_type; required for Megatron-made data).",
        )
        flags.DEFINE_integer("hidden_size", 128, "Model width.")
        flags.DEFINE_integer("num_layers", 2, "Transformer blocks.")
        flags.DEFINE_integer("num_attention_heads", 4, "Attention heads.")
        flags.DEFINE_integer("ffn_hidden_size", 512, "MLP width.")
    with flag_help.group(flag_help.OPTIMIZER):
        flags.DEFINE_float("lr", 3e-3, "Peak learning rate.")
        flags.DEFINE_float("min_lr", 3e-4, "Final learning rate (cosine decay).")
        flags.DEFINE_integer("lr_warmup_iters", 30, "Linear warm-up steps.", lower_bound=0)
        flags.DEFINE_float("weight_decay", 0.01, "AdamW weight decay.")
        flags.DEFINE_float("clip_grad", 1.0, "Global gradient-norm clipping.")
    with flag_help.group(flag_help.RUN):
        _define_run_flags()


def _define_run_flags() -> None:
    """Where the run writes, what it logs, its checkpoints."""
    flags.DEFINE_string(
        "workdir", "runs/demo",
        "Where the default corpus, caches and checkpoints go (relative to the current directory).",
    )
    flags.DEFINE_string(
        "checkpoint_dir", None,
        "Orbax checkpoint directory: local path or bucket URL, e.g. gs://b/run1 "
        "(default: <workdir>/checkpoints).",
    )
    flags.DEFINE_integer(
        "save_interval", 100, "Steps between checkpoints (0 = never).", lower_bound=0
    )
    flags.DEFINE_integer("keep_checkpoints", 2, "Newest checkpoints kept.", lower_bound=1)
    flags.DEFINE_integer("log_interval", 20, "Steps between log lines.", lower_bound=1)
    flags.DEFINE_integer(
        "log_datasets", 8,
        "Entries of the per-dataset log lines: with more datasets, the ones with the most tokens "
        "and one 'others' entry (0 = every dataset).", lower_bound=0,
    )
    flags.DEFINE_string(
        "metrics_jsonl", None,
        "Local file to which process 0 appends every log line and validation pass as a JSON "
        "record, with every dataset's figures (a resumed run keeps the records up to its "
        "checkpoint; default: none written).",
    )
    flags.DEFINE_float(
        "peer_timeout", 20.0,
        "Multi-process runs: seconds without a heartbeat after which a peer counts as lost and "
        "every process stops (keep it below --distributed_timeout).", lower_bound=0.5,
    )


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """The training example's settings: one field per flag of `define_train_flags` (the batch
    sizes, steps and evaluation are the step plan's: `StepSettings`)."""

    workdir: str
    lr: float
    min_lr: float
    lr_warmup_iters: int
    weight_decay: float
    clip_grad: float
    vocab_size: int | None
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    ffn_hidden_size: int
    log_interval: int
    log_datasets: int
    metrics_jsonl: str | None
    checkpoint_dir: str
    save_interval: int
    keep_checkpoints: int
    peer_timeout: float
    default_corpus_mb: float
    default_corpus_weights: tuple[str, ...]


def train_settings_from_flags() -> TrainSettings:
    """The `TrainSettings` of the flags (`--checkpoint_dir` defaults to <workdir>/checkpoints)."""
    fl = flags.FLAGS
    names = {f.name for f in dataclasses.fields(TrainSettings)}
    values = {name: fl[name].value for name in names}
    values["default_corpus_weights"] = tuple(values["default_corpus_weights"])
    if values["checkpoint_dir"] is None:
        values["checkpoint_dir"] = os.path.join(values["workdir"], "checkpoints")
    return TrainSettings(**values)

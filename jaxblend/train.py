"""Training example: a small decoder-only LM in JAX, fed by jaxblend's host-sharded loader.

With no data flags it first builds the built-in default corpus (three datasets generated from
fixed grammars, the same bytes on every machine, tokenized by the real preprocessing CLI with the
byte tokenizer; its SHA-256 is printed) and trains on a weighted blend of them:

  python -m jaxblend.train --flagfile=configs/demo.flags

With Megatron-LM data flags it trains on your `.bin`/`.idx` files:

  python -m jaxblend.train --data_path="30 /d/a 70 /d/b" --split=969,30,1 --seq_length=2048 \
      --global_batch_size=256 --train_iters=1000 --vocab_size=50304 --eod_id=50256

With `--rampup_batch_size="START INCREMENT RAMP_SAMPLES"` the global batch grows as with
Megatron-LM's `--rampup-batch-size` (the Megatron spelling of the flags is accepted too); each
batch size is compiled once.

Logs step, loss, the step's global batch size, tokens/s, the fraction of step time spent waiting for data and per-dataset
sample counts; saves model + optimizer + loader state (Orbax, every host its own shards) every
`--save_interval` steps to `--checkpoint_dir` (a directory or a gs:// URL) and resumes from the
newest checkpoint there, on any process count and mesh. SIGTERM (preemption) makes every process
checkpoint the same step and exit 0. In a multi-process run a lost peer stops every process within
`--peer_timeout` seconds with one line naming the process and step (`jaxblend.peer_watch`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from absl import app, flags, logging

from jaxblend import distributed
from jaxblend.tools import _cli, _entry, _step_plan

if TYPE_CHECKING:  # the data layers import JAX, which must wait for the flags
    from jaxblend.loading import LoaderSource
    from jaxblend.sampling import StepPlan

_WORKDIR = flags.DEFINE_string("workdir", "runs/demo", "Where the default corpus, caches and checkpoints go.")
_MESH_SHAPE = flags.DEFINE_string("mesh_shape", None, "Mesh shape, e.g. 8 or 4,2 (default: all devices on one data axis).")
_MESH_AXES = flags.DEFINE_string("mesh_axes", "data", "Mesh axis names: data, fsdp, tensor.")
_BATCH = flags.DEFINE_integer("global_batch_size", 16, "Global batch size.", lower_bound=1)
_ITERS = flags.DEFINE_integer("train_iters", 300, "Training steps.", lower_bound=1)
_LR = flags.DEFINE_float("lr", 3e-3, "Peak learning rate.")
_MIN_LR = flags.DEFINE_float("min_lr", 3e-4, "Final learning rate (cosine decay).")
_WARMUP = flags.DEFINE_integer("lr_warmup_iters", 30, "Linear warm-up steps.", lower_bound=0)
_WD = flags.DEFINE_float("weight_decay", 0.01, "AdamW weight decay.")
_CLIP = flags.DEFINE_float("clip_grad", 1.0, "Global gradient-norm clipping.")
_VOCAB = flags.DEFINE_integer("vocab_size", None, "Model vocabulary (default: the tokenizer's).")
_D_MODEL = flags.DEFINE_integer("hidden_size", 128, "Model width.")
_LAYERS = flags.DEFINE_integer("num_layers", 2, "Transformer blocks.")
_HEADS = flags.DEFINE_integer("num_attention_heads", 4, "Attention heads.")
_MLP = flags.DEFINE_integer("ffn_hidden_size", 512, "MLP width.")
_LOG_INTERVAL = flags.DEFINE_integer("log_interval", 20, "Steps between log lines.", lower_bound=1)
_EVAL_INTERVAL = flags.DEFINE_integer("eval_interval", 100, "Steps between validations (0 = never).", lower_bound=0)
_EVAL_ITERS = flags.DEFINE_integer("eval_iters", 4, "Validation batches per evaluation.", lower_bound=1)
_CKPT_DIR = flags.DEFINE_string(
    "checkpoint_dir", None,
    "Orbax checkpoint directory: local path or bucket URL, e.g. gs://b/run1 "
    "(default: <workdir>/checkpoints).",
)
_SAVE_INTERVAL = flags.DEFINE_integer("save_interval", 100, "Steps between checkpoints (0 = never).", lower_bound=0)
_KEEP = flags.DEFINE_integer("keep_checkpoints", 2, "Newest checkpoints kept.", lower_bound=1)
_PEER_TIMEOUT = flags.DEFINE_float(
    "peer_timeout", 20.0,
    "Multi-process runs: seconds without a heartbeat after which a peer counts as lost and every "
    "process stops (keep it below --distributed_timeout).", lower_bound=0.5,
)
_WORKERS = flags.DEFINE_integer("worker_count", 0, "Grain worker processes.", lower_bound=0)
_READ_AHEAD = flags.DEFINE_integer(
    "read_ahead", 0, "Steps read concurrently ahead of use (0: 8 from a bucket, else 1).",
    lower_bound=0,
)
_CORPUS_MB = flags.DEFINE_float("default_corpus_mb", 6.0, "Size cap of each built-in corpus dataset (MB).")
_CORPUS_WEIGHTS = flags.DEFINE_list("default_corpus_weights", ["50", "30", "20"], "Blend weights of code, prose, legal.")

_cli.define_source_flags()
distributed.define_distributed_flags()


def _has_data_flags() -> bool:
    fl = flags.FLAGS
    return bool(fl.data_path or fl.train_data_path or fl.mock_data)


def build_default_corpus(workdir: str) -> tuple[str, int, int]:
    """Builds (or reuses) the default corpus; returns (blend string, vocab size, eod id)."""
    import jax
    from jax.experimental import multihost_utils

    from jaxblend.preprocess import tokenizers
    from jaxblend.storage import IndexedDataset
    from jaxblend.training import corpus

    tok = tokenizers.ByteTokenizer()
    out = corpus.corpus_dir(workdir, int(_CORPUS_MB.value * 1e6))
    prefixes = {name: os.path.join(out, f"{name}_text_document") for name in corpus.DATASETS}
    if jax.process_index() == 0:
        raw = corpus.write_raw(os.path.join(out, "raw"), int(_CORPUS_MB.value * 1e6))
        print(f"default corpus sha256 {corpus.corpus_digest(raw)} "
              f"({_CORPUS_MB.value:g} MB per dataset, generated, no downloads)", flush=True)
        for name, prefix in prefixes.items():
            if IndexedDataset.exists(prefix):
                continue
            cmd = [
                corpus.python_executable(), "-m", "jaxblend.tools.preprocess",
                f"--input={raw[name]}", f"--output_prefix={os.path.join(out, name)}",
                "--tokenizer_type=byte", "--append_eod", "--workers=2",
                "--partitions=4",
            ]
            logging.info("building the %r dataset: %s", name, " ".join(cmd))
            subprocess.run(cmd, check=True)
    multihost_utils.sync_global_devices("default corpus ready")
    weights = _CORPUS_WEIGHTS.value
    if len(weights) != len(corpus.DATASETS):
        raise app.UsageError(f"--default_corpus_weights needs {len(corpus.DATASETS)} values")
    blend = " ".join(f"{w} {prefixes[n]}" for w, n in zip(weights, corpus.DATASETS, strict=True))
    return blend, tok.vocab_size, tok.eod


def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    distributed.initialize_from_flags()
    from jaxblend.peer_watch import PeerWatch, failures_reported

    watch = PeerWatch(_PEER_TIMEOUT.value).start()
    with failures_reported(watch, "starting"):
        _train(watch)
    watch.stop()


@dataclasses.dataclass
class _Data:
    """The run's data: the training source and its step plan, validation sources, dataset names."""

    train: LoaderSource
    plan: StepPlan
    valid: dict[str, LoaderSource]
    names: list[str]


@dataclasses.dataclass
class _Model:
    """The model configuration, its optimizer, and the parameters and optimizer state."""

    config: object
    optimizer: object
    params: object
    opt_state: object


@dataclasses.dataclass
class _Resume:
    """Where the run starts: the checkpointer, the first step, the loader state, sample counts."""

    ckpt: object
    directory: str
    start: int = 0
    loader_state: dict | None = None
    counts: list | None = None


def _data_flags_with_defaults() -> int:
    """Fills the data flags the run needs (default corpus, sample counts); returns the vocabulary."""
    fl = flags.FLAGS
    if not _has_data_flags():
        os.makedirs(_WORKDIR.value, exist_ok=True)
        blend, vocab, eod = build_default_corpus(_WORKDIR.value)
        fl.data_path = [blend]
        if fl.eod_id is None:
            fl.eod_id = eod
        if _VOCAB.value is None:
            fl.vocab_size = vocab
        if fl.data_cache_path is None:
            fl.data_cache_path = os.path.join(_WORKDIR.value, "index_cache")
    vocab_size = fl.vocab_size or (fl.mock_vocab_size if fl.mock_data else None)
    if vocab_size is None:
        raise app.UsageError("--vocab_size is required with --data_path")
    b = _BATCH.value
    if fl.train_samples is None:
        fl.train_samples = _step_plan.samples_for(b, _ITERS.value)
    if fl.valid_samples is None:
        fl.valid_samples = _eval_batches() * b
    if fl.test_samples is None:
        fl.test_samples = 0
    return vocab_size


def _eval_batches() -> int:
    return _EVAL_ITERS.value if _EVAL_INTERVAL.value else 0


def _open_data() -> _Data:
    """Opens the training and validation sources and the training step plan."""
    train = _cli.source_from_flags("train")
    valid = {}
    if _eval_batches():
        try:
            valid = _cli.validation_sources_from_flags()
        except ValueError as err:
            logging.warning("no validation: %s", err)
    plan = _step_plan.step_plan(len(train), _BATCH.value, _ITERS.value)
    return _Data(train, plan, valid, getattr(train, "dataset_names", ["mock"]))


def _init_model(vocab_size: int, mesh) -> _Model:
    """The model, AdamW with warm-up and cosine decay, initialized sharded on `mesh`."""
    import jax
    import optax

    from jaxblend.training import model

    cfg = model.ModelConfig(
        vocab_size=vocab_size, d_model=_D_MODEL.value, num_layers=_LAYERS.value,
        num_heads=_HEADS.value, mlp_dim=_MLP.value,
    )
    shardings = model.param_shardings(cfg, mesh)
    iters = _ITERS.value
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, _LR.value, _WARMUP.value, max(iters, _WARMUP.value + 1), _MIN_LR.value
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(_CLIP.value),
        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=_WD.value),
    )
    params = jax.jit(
        functools.partial(model.init_params, cfg), static_argnums=0, out_shardings=shardings
    )(flags.FLAGS.seed)
    opt_shardings = model.state_shardings(jax.eval_shape(optimizer.init, params), shardings, mesh)
    opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(params)
    return _Model(cfg, optimizer, params, opt_state)


def _restore(checkpoint, state: _Model) -> _Resume:
    """Restores the newest checkpoint into `state`, if there is one."""
    import jax

    directory = _CKPT_DIR.value or os.path.join(_WORKDIR.value, "checkpoints")
    resume = _Resume(checkpoint.Checkpointer(directory, keep=_KEEP.value), directory)
    last = resume.ckpt.latest_step()
    if last is None:
        return resume
    (state.params, state.opt_state), resume.loader_state, meta = resume.ckpt.restore(
        last, (state.params, state.opt_state)
    )
    resume.start = int(resume.loader_state["step"])
    if resume.start != last:
        raise ValueError(f"{directory} step {last}: its loader state is at step {resume.start}")
    resume.counts = meta.get("samples_per_dataset")
    logging.info("resumed from %s step %d", directory, resume.start)
    if jax.process_index() == 0:
        print(f"resumed from {directory} step {resume.start}", flush=True)
    return resume


def _compile_steps(state: _Model, num_datasets: int):
    """The jitted train and eval steps (each traced once per batch shape of the plan)."""
    import jax
    import jax.numpy as jnp
    import optax

    from jaxblend.training import model

    cfg, optimizer = state.config, state.optimizer

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, batch):
        (loss, tokens), grads = jax.value_and_grad(
            lambda p: model.loss_fn(p, cfg, batch), has_aux=True
        )(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        counts = jnp.bincount(batch["dataset_ids"], length=num_datasets)
        return params, opt_state, loss, tokens, counts

    @jax.jit
    def eval_step(params, batch):
        return model.loss_fn(params, cfg, batch)

    return train_step, eval_step


class _LogWindow:
    """Tokens, wall time and data wait since the last log line (per-step batch sizes)."""

    def __init__(self, loader):
        self.loader = loader
        self.reset()

    def reset(self) -> None:
        self.began, self.wait, self.tokens = time.perf_counter(), self.loader.wait_seconds, 0

    def line(self, done: int, loss: float, batch_size: int, names, seen) -> str:
        elapsed = time.perf_counter() - self.began
        wait = self.loader.wait_seconds - self.wait
        mix = " ".join(f"{os.path.basename(n)}={c}" for n, c in zip(names, seen, strict=True))
        return (
            f"step {done:5d}  loss {loss:.4f}  batch {batch_size}  "
            f"{self.tokens / elapsed:9.0f} tok/s  data-wait {100 * wait / elapsed:4.1f}%  "
            f"samples {mix}"
        )


def _evaluate(done: int, params, eval_step, data: _Data, mesh, batch_axes) -> None:
    """Prints the validation loss of every validation set."""
    import jax
    import numpy as np

    from jaxblend.loading import make_loader

    b = _BATCH.value
    for vname, valid_source in data.valid.items():
        vloader = make_loader(
            valid_source, mesh, global_batch_size=b, batch_axes=batch_axes,
            num_steps=min(_eval_batches(), len(valid_source) // b),
        )
        losses = [float(eval_step(params, vb)[0]) for vb in vloader]
        if vname != "valid":  # one of --multiple_validation_sets
            vname = f"{vname} ({os.path.basename(valid_source.dataset_names[0])})"
        if losses and jax.process_index() == 0:
            label = "validation" if vname == "valid" else f"validation {vname}"
            print(f"step {done:5d}  {label} loss {np.mean(losses):.4f}", flush=True)


def _run_steps(watch, loader, state: _Model, resume: _Resume, data: _Data, steps, mesh,
               batch_axes):
    """Trains from `resume.start` to `--train_iters`; returns (last loss, preempted step)."""
    import jax
    import numpy as np

    from jaxblend.training.preemption import PreemptionNotice

    train_step, eval_step = steps
    seen = np.zeros(len(data.names), np.int64)
    if resume.counts is not None and len(resume.counts) == len(data.names):
        seen += np.asarray(resume.counts, np.int64)
    preemption = PreemptionNotice()
    window = _LogWindow(loader)
    iters, seq = _ITERS.value, flags.FLAGS.seq_length
    logging.info(
        "training %d steps from %d: batch %s x %d tokens (%d batch shapes), mesh %s, datasets %s",
        iters, resume.start, _BATCH.value, seq, len(data.plan.batch_shapes()), dict(mesh.shape),
        data.names,
    )
    watch.phase = "training"
    loss, preempted_at = None, None
    for step in range(resume.start, iters):
        watch.step = step
        batch = next(loader)
        state.params, state.opt_state, loss, _, counts = train_step(
            state.params, state.opt_state, batch
        )
        seen += np.asarray(jax.device_get(counts))
        size = data.plan.batch_size(step)
        window.tokens += size * seq
        done = step + 1
        watch.step = done
        if done % _LOG_INTERVAL.value == 0 or done == iters or step == resume.start:
            line = window.line(done, float(loss), size, data.names, seen)
            if jax.process_index() == 0:
                print(line, flush=True)
            window.reset()
        if _EVAL_INTERVAL.value and done % _EVAL_INTERVAL.value == 0:
            _evaluate(done, state.params, eval_step, data, mesh, batch_axes)
        preempt = preemption.reached(done)
        if preempt or (_SAVE_INTERVAL.value and (done % _SAVE_INTERVAL.value == 0 or done == iters)):
            resume.ckpt.save(
                done, (state.params, state.opt_state), loader,
                {"model": dataclasses.asdict(state.config), "samples_per_dataset": seen.tolist()},
            )
        if preempt:
            preempted_at = done
            logging.info("preempted: checkpointing step %d and stopping", done)
            break
    return loss, preempted_at


def _train(watch) -> None:
    import jax
    from jax.experimental import multihost_utils

    from jaxblend.loading import PrefetchOptions, make_loader

    try:
        from jaxblend.training import checkpoint
    except ModuleNotFoundError as err:
        raise app.UsageError(
            f"the training example saves Orbax checkpoints ({err}): pip install 'jaxblend[orbax]'"
        ) from None

    watch.phase = "preparing the data"
    vocab_size = _data_flags_with_defaults()
    mesh = _cli.mesh_from_flags(_MESH_SHAPE.value, _MESH_AXES.value)
    batch_axes = _cli.batch_axes_of(mesh)
    data = _open_data()
    watch.phase = "initializing the model"
    state = _init_model(vocab_size, mesh)
    watch.phase = "restoring the checkpoint"
    resume = _restore(checkpoint, state)
    train_step, eval_step = _compile_steps(state, len(data.names))

    watch.phase = "opening the data"
    loader = make_loader(
        data.train, mesh, plan=data.plan, batch_axes=batch_axes,
        prefetch=PrefetchOptions(worker_count=_WORKERS.value, read_ahead=_READ_AHEAD.value),
        state=resume.loader_state,
    )
    if loader.step != resume.start:
        raise ValueError(f"checkpoint step {resume.start} but loader state step {loader.step}")
    loss, preempted_at = _run_steps(
        watch, loader, state, resume, data, (train_step, eval_step), mesh, batch_axes
    )
    watch.phase = "saving the checkpoint"
    resume.ckpt.close()
    if jax.process_index() == 0:
        _print_outcome(preempted_at, loss, resume, data)
    watch.phase = "finishing"
    multihost_utils.sync_global_devices("train done")


def _print_outcome(preempted_at: int | None, loss, resume: _Resume, data: _Data) -> None:
    """The run's last line: preempted, finished, or nothing left to train."""
    if preempted_at is not None:
        print(
            f"preempted: saved checkpoint step {preempted_at} in {resume.directory}; exiting "
            "(rerun the same command, on any number of hosts, to resume)", flush=True,
        )
    elif loss is not None:
        print(f"finished at step {_ITERS.value}: final loss {float(loss):.4f}", flush=True)
    else:
        available = _step_plan.step_plan(len(data.train), _BATCH.value).num_steps
        print(
            f"already trained to step {resume.start} (checkpoint in {resume.directory}); raise "
            f"--train_iters (the data stream holds {available} steps) to continue, or delete the "
            "directory to start over", flush=True,
        )


if __name__ == "__main__":
    _entry.run(main, megatron_nargs=_step_plan.MEGATRON_NARGS)

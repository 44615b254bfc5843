r"""Training example: a small decoder-only LM in JAX, fed by jaxblend's host-sharded loader.

With no data flags it first builds the built-in default corpus (three datasets generated from
fixed grammars, the same bytes on every machine, tokenized by the real preprocessing CLI with the
byte tokenizer; its SHA-256 is printed) and trains on a weighted blend of them:

  python -m jaxblend.train --flagfile=configs/demo.flags

It needs the `train` extra (`pip install 'jaxblend[train]'`: optax and Orbax) and uses only the
public API of jaxblend: its flags and their config objects come from `jaxblend.cli`.

With Megatron-LM data flags it trains on your `.bin`/`.idx` files:

  python -m jaxblend.train --data_path="30 /d/a 70 /d/b" --split=969,30,1 --seq_length=2048 \
      --global_batch_size=256 --train_iters=1000 --vocab_size=50304 --eod_id=50256

`--vocab_size` and `--eod_id` default to the values recorded with datasets made by
`jaxblend.tools.preprocess` (`jaxblend.tokenizer_facts`); a blend of different tokenizers, or ids
the vocabulary cannot hold, stop the run before training.

With `--rampup_batch_size="START INCREMENT RAMP_SAMPLES"` the global batch grows as with
Megatron-LM's `--rampup-batch-size` (the Megatron spelling of the flags is accepted too); each
batch size is compiled once.

With `--phase_transition_iterations="100,200"` (Megatron-LM's `--phase-transition-iterations`) the
run saves a checkpoint and exits 0 at each listed step; relaunched with the next phase's data
flags, it trains that phase on a fresh blend of the phase's length (docs/schedules.md).

Logs step, loss, the step's global batch size, tokens/s, the fraction of step time spent waiting
for data and per-dataset sample counts, then a line of each dataset's loss since the last line and
loss tokens since step 0, then what process 0's loader read (`loader:` per store MB/s, requests,
latency p50/p99, retries, steps read ahead; docs/telemetry.md) (`--log_datasets`; `--metrics_jsonl` writes both as JSON; validation
reports each dataset of a blended validation split too: docs/training.md); saves model + optimizer + loader state (Orbax, every host its own shards) every
`--save_interval` steps to `--checkpoint_dir` (a directory or a gs:// URL) and resumes from the
newest checkpoint there, on any process count and mesh (a directory holding another model's
checkpoint is refused with one line naming it and the flag that chose it, `--checkpoint_dir` or
`--workdir`, and so is other data under the same model, naming the data flags that differ;
"resumed from" is printed once the loader has accepted the checkpoint); a resume reads the
loader state first, so the first steps are read, and the step function compiled for the first
batch, while the arrays are restored (docs/training.md, "Resume"). `--metrics_port` serves each host's loader
figures to Prometheus; a batch not ready after `--stall_threshold` seconds gets one line naming the
reads still pending. SIGTERM (preemption) makes every process
checkpoint the same step and exit 0. In a multi-process run a lost peer stops every process within
`--peer_timeout` seconds with one line naming the process and step (`jaxblend.peer_watch`). A
non-finite loss stops every process at the latest at the next log line, evaluation or checkpoint
with one line (the step, the last finite loss, the flags to change, the checkpoint to resume
from) and exit code 1; no checkpoint holds a non-finite state (`jaxblend.training.divergence`).

A training dataset shorter than one sequence, or repeated more than `--warn_epochs` epochs, is a
warning before training (`jaxblend.cli.data_warnings`, the lines `inspect preflight` prints).

Its output is what it prints (the loss lines); the libraries' INFO logs (absl, Orbax, Grain,
JAX) show only with `--verbose`, warnings and errors always.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from absl import app, flags, logging

from jaxblend import cli
from jaxblend.cli import assembly, data_warnings, phase_flags
from jaxblend.cli.entry import runner, usage_errors

if TYPE_CHECKING:  # the data layers import JAX, which must wait for the flags
    from jaxblend.loading import LoaderSource
    from jaxblend.sampling import PhaseStepPlan, StepPlan

def define_flags() -> None:
    """Every flag of the training example (called by the entry point before parsing)."""
    cli.define_data_flags()
    cli.define_schema_flags()
    cli.define_source_flags()
    cli.define_step_plan_flags()
    cli.define_mesh_flags()
    cli.define_loader_flags()
    cli.define_telemetry_flags()
    cli.define_distributed_flags()
    cli.define_train_flags()
    cli.define_tokenizer_flags()
    phase_flags.define_phase_flags()
    data_warnings.define_data_warning_flags()


def _has_data_flags() -> bool:
    values = cli.read_flag_values()
    return any(getattr(values, name) for name in (
        "data_path", "train_data_path", "valid_data_path", "test_data_path", "data_args_path",
        "per_split_data_args_path", "data_schedule", "mock_data",
    ))


def build_default_corpus(
    workdir: str, corpus_mb: float, weights: Sequence[str]
) -> tuple[str, int, int]:
    """Builds (or reuses) the default corpus; returns (blend string, vocab size, eod id).

    Args:
      workdir: the corpus goes under it.
      corpus_mb: size cap of each dataset (MB).
      weights: blend weights of the datasets, in `corpus.DATASETS` order.
    """
    import jax
    from jax.experimental import multihost_utils

    from jaxblend import IndexedDataset
    from jaxblend.preprocess import tokenizers
    from jaxblend.training import corpus

    if len(weights) != len(corpus.DATASETS):
        raise app.UsageError(f"--default_corpus_weights needs {len(corpus.DATASETS)} values")
    tok = tokenizers.ByteTokenizer()
    out = corpus.corpus_dir(workdir, int(corpus_mb * 1e6))
    prefixes = {name: os.path.join(out, f"{name}_text_document") for name in corpus.DATASETS}
    if jax.process_index() == 0:
        raw = corpus.write_raw(os.path.join(out, "raw"), int(corpus_mb * 1e6))
        print(f"default corpus sha256 {corpus.corpus_digest(raw)} "
              f"({corpus_mb:g} MB per dataset, generated, no downloads)", flush=True)
        for name, prefix in prefixes.items():
            if IndexedDataset.exists(prefix):
                continue
            cmd = [
                sys.executable, "-m", "jaxblend.tools.preprocess",
                f"--input={raw[name]}", f"--output_prefix={os.path.join(out, name)}",
                "--tokenizer_type=byte", "--append_eod", "--workers=2",
                "--partitions=4", *(() if flags.FLAGS.verbose else ("--verbosity=-1",)),
            ]
            logging.info("building the %r dataset: %s", name, " ".join(cmd))
            subprocess.run(cmd, check=True)
    multihost_utils.sync_global_devices("default corpus ready")
    blend = " ".join(f"{w} {prefixes[n]}" for w, n in zip(weights, corpus.DATASETS, strict=True))
    return blend, tok.vocab_size, tok.eod


def main(argv: Sequence[str]) -> None:
    cli.initialize_from_flags()
    settings = cli.train_settings_from_flags()
    from jaxblend.peer_watch import PeerWatch, failures_reported
    from jaxblend.training.divergence import DivergedError

    watch = PeerWatch(settings.peer_timeout).start()
    diverged = None
    with failures_reported(watch, "starting", verbose=flags.FLAGS.verbose):
        try:
            _train(watch, settings)
        except DivergedError as err:  # every process sees it at the same step: each stops itself
            diverged = err
    watch.stop()
    if diverged is not None:
        raise diverged


@dataclasses.dataclass
class _Data:
    """The run's data: the training source and its step plan, validation sources, dataset names."""

    train: LoaderSource
    plan: StepPlan
    valid: dict[str, LoaderSource]
    names: list[str]
    seq_length: int
    steps: cli.StepSettings
    history: object = None  # a `--data_schedule` run's `StagedHistory` (resume across edits)
    record: dict | None = None  # what a checkpoint records of the data (`_data_record`)
    compiled_sets: set[str] = dataclasses.field(default_factory=set)  # evaluated (`_evaluate`)


@dataclasses.dataclass
class _Model:
    """The model configuration, its optimizer, and the parameters and optimizer state."""

    config: object
    optimizer: object
    params: object
    opt_state: object


def _data_spec(
    s: cli.TrainSettings, phase: PhaseStepPlan | None = None
) -> tuple[cli.RunConfig, int]:
    """(what the run reads, the model's vocabulary): the run's data, assembled from the flags
    (`cli.run_config_from_flags`) with the run's defaults: the built-in corpus (and its vocabulary,
    EOD id and index cache) without data flags; the sample counts not given by `--*_samples`
    derive from the step-plan flags (`jaxblend.cli.steps`, as in every tool); `--vocab_size` and
    the EOD id default to what the datasets' records say (their tokenizer's). A blend of different
    tokenizers, an EOD or pad id outside the vocabulary, and data holding ids the model cannot
    embed (datasets with a known tokenizer: the record's largest id, else a scan, logged) are
    refused here, before anything is built."""
    from jaxblend.index import config_prefixes
    from jaxblend.tokenizer_facts import TokenizerMismatchError, check_ids

    default_blend, vocab_size, eod_id, cache = None, s.vocab_size, None, None
    if not _has_data_flags():
        os.makedirs(s.workdir, exist_ok=True)
        blend, corpus_vocab, eod_id = build_default_corpus(
            s.workdir, s.default_corpus_mb, s.default_corpus_weights
        )
        default_blend = tuple(blend.split())
        vocab_size = vocab_size if vocab_size is not None else corpus_vocab
        cache = os.path.join(s.workdir, "index_cache")
    with usage_errors(TokenizerMismatchError):
        run = cli.run_config_from_flags(
            default_blend=default_blend, default_map_location=cache, default_eod_id=eod_id,
            phase=phase,  # Megatron's phases: the train split holds this phase alone
            tokenizer=cli.run_tokenizer_from_flags,
        )
    if vocab_size is None:  # the mock data's, else the datasets' recorded one
        vocab_size = run.mock.vocab_size if run.mock is not None else run.tokenizer.vocab_size
    if vocab_size is None:
        assembly.check_datasets_exist(run.config, run.access)  # a wrong path is the real error
        raise app.UsageError(
            "--vocab_size is required with --data_path when the datasets have no preprocessing "
            "record (made by Megatron-LM, or a renamed copy): "
            f"{assembly.without_record(config_prefixes(run.config))}; pass --vocab_size (and "
            "--eod_id), or --tokenizer_type (and its files)"
        )
    with usage_errors(TokenizerMismatchError):
        check_ids(
            vocab_size, run.schema.eod_id, run.schema.pad_id, run.tokenizer.facts, run.access,
            log=logging.warning,
        )
    return run, vocab_size


def _open_data(run: cli.RunConfig, phase: PhaseStepPlan | None = None) -> _Data:
    """Opens the training and validation sources and the training step plan."""
    train = cli.open_source("train", run)
    valid = {}
    if run.steps.eval_batches:
        try:
            valid = cli.open_validation_sources(run)
        except ValueError as err:
            logging.warning("no validation: %s", err)
    plan = phase or run.steps.covering(len(train), run.steps.train_iters)
    names = getattr(train, "dataset_names", ["mock"])
    history = cli.history_of("train", train, run)
    return _Data(
        train, plan, valid, names, run.seq_length, run.steps, history, _data_record(train)
    )


# Flag values that choose where and how data is read, not what is read: not part of the record.
_ACCESS_FIELDS = frozenset({
    "data_cache_path", "data_cache_mirror", "data_cache_wait", "s3_endpoint", "s3_region",
    "storage_concurrency", "storage_retries", "storage_timeout", "storage_backend",
    "global_batch_size_given",
})


def _data_record(train) -> dict:
    """What a checkpoint records of the run's data: the data flags' values (`--train_iters` only
    while it sizes the train split, without `--train_samples`) and the training source's
    fingerprint (its maps key), as JSON values."""
    values = dataclasses.asdict(cli.read_flag_values())
    if values["train_samples"] is not None:
        del values["train_iters"]  # a resume raises it
    return {
        "flags": {k: list(v) if isinstance(v, tuple) else v
                  for k, v in values.items() if k not in _ACCESS_FIELDS},
        "maps_key": getattr(train, "fingerprint", None),
    }


def _data_differences(saved: dict | None, record: dict) -> str | None:
    """What differs between the data a checkpoint records and this run's, as flags
    (`it was trained with --seed=1234, this run has --seed=7`), or the maps keys when only the
    datasets differ; None when the checkpoint records no data, or the same."""
    if not isinstance(saved, dict) or not isinstance(saved.get("flags"), dict):
        return None
    differs = _differences(
        saved["flags"], record["flags"],
        lambda n, v: f"--{n}={' '.join(map(str, v)) if isinstance(v, list) else v}",
    )
    if differs is None and saved.get("maps_key") != record["maps_key"]:
        return (
            f"its datasets or maps differ (maps key {saved.get('maps_key')}, this run's "
            f"{record['maps_key']})"
        )
    return differs


def _check_same_data(resume: _Resume, data: _Data, loader_state: dict | None) -> None:
    """Refuses, in one line naming the checkpoint directory, the flag that chose it and the data
    flags that differ, a resume whose loader state another data configuration saved (a staged
    split's history explains its own refusals, and a checkpoint recording no data gets the
    loader's refusal)."""
    from jaxblend.loading.loader import loader_fingerprint
    from jaxblend.loading.resume_history import STATE_KEY

    if loader_state is None or data.history is not None or loader_state.get(STATE_KEY):
        return
    ours = loader_fingerprint(data.train, data.plan)
    if loader_state.get("fingerprint") == ours:
        return
    differs = _data_differences((resume.meta or {}).get("data"), data.record)
    if differs is None:
        return
    ckpt = resume.ckpt
    raise app.UsageError(
        f"{ckpt.directory} (from {ckpt.chosen_by}) holds a checkpoint (step {resume.start}) whose "
        "loader state comes from a different data configuration (fingerprint "
        f"{loader_state.get('fingerprint')}, this run's {ours}): {differs}; resume with its data "
        f"flags, give this run its own {ckpt.chosen_by}, or delete {ckpt.directory} to start over"
    )


def _warn_about_data(run: cli.RunConfig) -> None:
    """Logs (process 0) a warning for each training dataset shorter than one sequence or repeated
    more than `--warn_epochs` epochs (`cli.data_warnings`), from the estimate `inspect preflight`
    prints (the datasets' `.idx` opened for it). With a bucket map store the hosts open no `.idx`
    (they start from the publication): there `inspect preflight` says it."""
    import jax

    from jaxblend import opening
    from jaxblend.index.estimate import estimate_plan
    from jaxblend.map_store import publication

    if run.config is None or jax.process_index() != 0 or publication.applies(run.access):
        return
    _, infos = opening.open_config_datasets(run.config, run.access)
    estimate = estimate_plan(run.config, infos)
    for line in data_warnings.training_data_warnings(
        estimate.datasets, run.config.seq_length, flags.FLAGS.warn_epochs
    ):
        logging.warning("%s", line)


def _import_optax():
    try:
        import optax
    except ModuleNotFoundError:
        raise app.UsageError(
            "the training example needs optax: pip install 'jaxblend[train]'"
        ) from None
    return optax


def _model(s: cli.TrainSettings, train_iters: int, vocab_size: int, mesh) -> _Model:
    """The model and AdamW with warm-up and cosine decay; its parameters and optimizer state are
    abstract (`jax.ShapeDtypeStruct`s with their shardings on `mesh`) until `_initialize` or a
    checkpoint's restore fills them."""
    import jax

    from jaxblend.training import model

    optax = _import_optax()
    cfg = model.ModelConfig(
        vocab_size=vocab_size, d_model=s.hidden_size, num_layers=s.num_layers,
        num_heads=s.num_attention_heads, mlp_dim=s.ffn_hidden_size,
    )
    shardings = model.param_shardings(cfg, mesh)
    iters, warmup = train_iters, s.lr_warmup_iters
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, s.lr, warmup, max(iters, warmup + 1), s.min_lr
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(s.clip_grad),
        optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=s.weight_decay),
    )

    def laid_out(abstract, sharding_tree):
        return jax.tree.map(
            lambda x, sharding: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
            abstract, sharding_tree,
        )

    params = laid_out(jax.eval_shape(functools.partial(model.init_params, cfg), 0), shardings)
    abstract_opt = jax.eval_shape(optimizer.init, params)
    opt_state = laid_out(abstract_opt, model.state_shardings(abstract_opt, shardings, mesh))
    return _Model(cfg, optimizer, params, opt_state)


def _initialize(state: _Model, seed: int) -> None:
    """Fills `state` with the initial parameters (deterministic in `seed`) and optimizer state, in
    the shardings its abstract arrays carry."""
    import jax

    from jaxblend.training import model

    shardings = jax.tree.map(lambda x: x.sharding, state.params)
    state.params = jax.jit(
        functools.partial(model.init_params, state.config), static_argnums=0,
        out_shardings=shardings,
    )(seed)
    opt_shardings = jax.tree.map(lambda x: x.sharding, state.opt_state)
    state.opt_state = jax.jit(state.optimizer.init, out_shardings=opt_shardings)(state.params)


# The model flags of each `ModelConfig` field, for messages.
_MODEL_FLAGS = {
    "vocab_size": "--vocab_size", "d_model": "--hidden_size", "num_layers": "--num_layers",
    "num_heads": "--num_attention_heads", "mlp_dim": "--ffn_hidden_size",
}


def _differences(saved: dict, ours: dict, spelled: Callable[[str, Any], str]) -> str | None:
    """`it was trained with <saved>, this run has <ours>` over the entries of both that differ,
    each `spelled(name, value)` as a flag; None when none differs."""
    names = [n for n in ours if n in saved and saved[n] != ours[n]]
    if not names:
        return None

    def flags_of(values: dict) -> str:
        return " ".join(spelled(n, values[n]) for n in names)

    return f"it was trained with {flags_of(saved)}, this run has {flags_of(ours)}"


class _Resume:
    """Where the run starts: its checkpoint directory, opened once (`Checkpointer`) and its steps
    listed once, when first asked for (by the phase plan, `--phase_transition_iterations`, before
    the data is opened, else by `_resume_point` after it; on a bucket, each is a request), then
    the first step, the loader state and the checkpoint's metadata (per-dataset figures so far, a
    Megatron phase's batch size) that `_resume_point` reads.

    Args:
      checkpoint: the `jaxblend.training.checkpoint` module (imported by `_train`).
      s: the run's settings.
    """

    def __init__(self, checkpoint, s: cli.TrainSettings) -> None:
        self._checkpoint = checkpoint
        self._settings = s
        self.start = 0
        self.loader_state: dict | None = None
        self.meta: dict | None = None
        self.same_stream = False  # the loader continues the checkpoint's data stream

    @functools.cached_property
    def ckpt(self):
        """The run's `Checkpointer` (opened on first use)."""
        s = self._settings
        # The flag that chose the directory: --workdir when its checkpoints/ is the default.
        chosen_by = "--checkpoint_dir" if flags.FLAGS["checkpoint_dir"].present else "--workdir"
        return self._checkpoint.Checkpointer(
            s.checkpoint_dir, keep=s.keep_checkpoints, chosen_by=chosen_by,
            show_save_waits=flags.FLAGS.verbose,
        )

    @functools.cached_property
    def latest(self) -> int | None:
        """The newest committed step when the run started (None: none)."""
        return self.ckpt.latest_step()

    def close_unused(self) -> None:
        """Closes the checkpointer if it was opened and has saved nothing (a run stopped before
        its first save: nothing to wait for, on any process); a run that saved closes it itself
        (`_train_from`, `_run_steps`)."""
        ckpt = self.__dict__.get("ckpt")
        if ckpt is not None and not ckpt.saved:
            ckpt.close()


def _resume_point(resume: _Resume, state: _Model) -> None:
    """Fills `resume` with where the run resumes: the newest checkpoint's step, loader state and
    metadata, read without its arrays (`_restore_state` reads them, while the loader reads its
    first steps); a checkpoint of another model (another run's, e.g. the demo's under the default
    `--workdir`) is refused first, with the directory and the flag that chose it."""
    ckpt, last = resume.ckpt, resume.latest
    if last is None:
        return
    loader_state, meta = ckpt.resume_point(last)
    saved = meta.get("model")  # `it was trained with --hidden_size=128, this run has ...=64`
    differs = isinstance(saved, dict) and _differences(
        saved, dataclasses.asdict(state.config), lambda n, v: f"{_MODEL_FLAGS.get(n, n)}={v}"
    )
    if differs:
        raise app.UsageError(ckpt.another_run(last, differs))
    resume.start, resume.loader_state, resume.meta = int(loader_state["step"]), loader_state, meta
    if resume.start != last:
        raise ValueError(
            f"{ckpt.directory} step {last}: its loader state is at step {resume.start}"
        )


def _restore_state(resume: _Resume, state: _Model, seed: int, phase_line: str | None) -> None:
    """Fills `state` from the resume point's checkpoint and says where the run resumes (and the
    Megatron phase it enters: `phase_line`), or initializes it (a run from step 0). It runs once
    the loader has accepted the checkpoint's state: a refused resume prints no "resumed" line."""
    import jax

    if resume.loader_state is None:
        _initialize(state, seed)
        return
    state.params, state.opt_state = resume.ckpt.restore_state(
        resume.start, (state.params, state.opt_state)
    )
    logging.info("resumed from %s step %d", resume.ckpt.directory, resume.start)
    if jax.process_index() != 0:
        return
    print(f"resumed from {resume.ckpt.directory} step {resume.start}", flush=True)
    if phase_line is not None:
        print(phase_line, flush=True)


def _compile_steps(state: _Model, num_datasets: int, mesh):
    """The jitted train and eval steps (each traced once per batch shape of the plan).

    `train_step(params, opt_state, sums, batch)` returns the updated parameters and optimizer
    state, the batch's loss and `sums` plus the batch's per-dataset sums
    (`jaxblend.training.dataset_metrics`: loss, loss tokens, rows of each of the split's
    `num_datasets` datasets), all left on the device. `eval_step(params, batch, num_datasets)`
    returns the batch's loss and its per-dataset sums.
    """
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxblend.training import dataset_metrics, model

    optax = _import_optax()
    cfg, optimizer = state.config, state.optimizer
    replicated = NamedSharding(mesh, P())

    def loss_and_sums(params, batch, datasets):
        nll = model.token_losses(params, cfg, batch)
        loss, _ = model.masked_mean(nll, batch["loss_mask"])
        sums = dataset_metrics.batch_sums(nll, batch["loss_mask"], batch["dataset_ids"], datasets)
        return loss, jax.lax.with_sharding_constraint(sums, replicated)

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def train_step(params, opt_state, sums, batch):
        (loss, batch_sums), grads = jax.value_and_grad(
            lambda p: loss_and_sums(p, batch, num_datasets), has_aux=True
        )(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss, dataset_metrics.add(sums, batch_sums)

    @functools.partial(jax.jit, static_argnums=2)
    def eval_step(params, batch, datasets):
        return loss_and_sums(params, batch, datasets)

    return train_step, eval_step


def _first_step(loader, train_step, state: _Model, num_datasets: int, mesh) -> Callable:
    """Takes the first batch from the loader and compiles `train_step` for it, in a thread, while
    the main thread restores the checkpoint's arrays: `state`'s parameters and optimizer state
    are still abstract (shapes and shardings) when it starts, which is all a compilation needs
    (`jit(...).lower(...).compile()`; the jitted step then finds the executable in JAX's cache).

    Returns:
      `join()`: the first batch (None: the loader had none left), once the step is compiled; it
      raises what reading or compiling raised.
    """
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxblend.training import dataset_metrics

    def abstract(tree, sharding=None):
        return jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding or x.sharding), tree
        )

    sums = abstract(
        jax.eval_shape(functools.partial(dataset_metrics.zeros, num_datasets)),
        NamedSharding(mesh, P()),
    )
    params, opt_state, done = state.params, state.opt_state, {}

    def read_and_compile() -> None:
        try:
            done["batch"] = next(loader, None)
            if done["batch"] is not None:
                train_step.lower(params, opt_state, sums, abstract(done["batch"])).compile()
        except Exception as err:  # noqa: BLE001 - raised in the main thread by `join`
            done["error"] = err

    thread = threading.Thread(target=read_and_compile, name="jaxblend-first-step", daemon=True)
    thread.start()

    def join():
        thread.join()
        if "error" in done:
            raise done["error"]
        return done["batch"]

    return join


class _LogWindow:
    """Tokens, wall time, data wait and the loader's figures (`loader.metrics()`, this host's)
    since the last log line (per-step batch sizes)."""

    def __init__(self, loader):
        self.loader = loader
        self.reset()

    def reset(self) -> None:
        self.began, self.wait, self.tokens = time.perf_counter(), self.loader.wait_seconds, 0
        self.metrics = self.loader.metrics()
        self.loader_window = self.metrics.since(self.metrics)

    def start_clock(self) -> None:
        """Starts the window's time and data wait now, keeping the loader's figures from when the
        window was made: the first batch, taken while the checkpoint was restored, belongs to the
        first window, and its wait was not the training loop's."""
        self.began, self.wait = time.perf_counter(), self.loader.wait_seconds

    def figures(self, loss: float, batch_size: int) -> dict:
        """The log line's figures (also the `--metrics_jsonl` record's, with `"loader"`)."""
        elapsed = time.perf_counter() - self.began
        wait = self.loader.wait_seconds - self.wait
        self.loader_window = self.loader.metrics().since(self.metrics)
        return {"loss": float(loss), "batch_size": int(batch_size),
                "tokens_per_second": self.tokens / elapsed, "data_wait": wait / elapsed,
                "loader": self.loader_window.record()}

    def line(self, done: int, figures: dict, totals, top: int) -> str:
        """The step's log line; `samples` lists the samples of each dataset since step 0 (the
        `top` - 1 datasets with the most tokens and the others together, with many)."""
        from jaxblend.training.dataset_metrics import short_names, shown

        names = short_names(totals.names)
        one, rest = shown(totals.tokens, top)
        mix = [f"{names[j]}={int(totals.samples[j])}" for j in one]
        if rest:
            mix.append(f"others({len(rest)})={int(totals.samples[rest].sum())}")
        return (
            f"step {done:5d}  loss {figures['loss']:.4f}  batch {figures['batch_size']}  "
            f"{figures['tokens_per_second']:9.0f} tok/s  "
            f"data-wait {100 * figures['data_wait']:4.1f}%  samples {' '.join(mix)}"
        )

    def loader_line(self, done: int) -> str | None:
        """What this host's loader read since the last log line (None if nothing to say)."""
        summary = self.loader_window.summary()
        return f"step {done:5d}  loader: {summary}" if summary else None


def _evaluate(
    done: int, params, eval_step, data: _Data, mesh, batch_axes, s: cli.TrainSettings,
    metrics_log, peers: Callable[[str], None],
) -> None:
    """Prints the validation loss of every validation set: the mean of its batches' losses and,
    for a set blending several datasets, each dataset's loss (over that dataset's loss tokens of
    the same batches).

    A set's first evaluation compiles its step for its first batch and then calls
    `peers(name)`, which waits for every process (`PeerWatch.wait_for_peers`): as at the first
    training step, no process runs the step's collectives while a peer still compiles it (one
    that found it in JAX's persistent compilation cache would wait past Gloo's 30 s).
    """
    import jax
    import numpy as np

    from jaxblend.loading import make_loader
    from jaxblend.training import dataset_metrics

    b = data.steps.final_global_batch_size
    for vname, valid_source in data.valid.items():
        vloader = make_loader(
            valid_source, mesh, global_batch_size=b, batch_axes=batch_axes,
            num_steps=min(data.steps.eval_batches, len(valid_source) // b),
        )
        names = list(getattr(valid_source, "dataset_names", ["mock"]))
        batches = iter(vloader)
        first = next(batches, None)
        if first is not None and vname not in data.compiled_sets:
            eval_step.lower(params, first, len(names)).compile()
            peers(f"evaluation {vname}")
            data.compiled_sets.add(vname)
        outputs = jax.device_get([
            eval_step(params, vb, len(names))
            for vb in itertools.chain(() if first is None else (first,), batches)
        ])
        if not outputs or jax.process_index() != 0:
            continue
        loss = float(np.mean([float(batch_loss) for batch_loss, _ in outputs]))
        sums = jax.tree.map(lambda *xs: np.sum(xs, axis=0), *(bs for _, bs in outputs))
        label = "validation"
        if vname != "valid":  # one of --multiple_validation_sets
            label = f"validation {vname} ({os.path.basename(names[0])})"
        line = f"step {done:5d}  {label} loss {loss:.4f}"
        if len(names) > 1:
            line += "  " + dataset_metrics.validation_part(names, sums, s.log_datasets)
        print(line, flush=True)
        if metrics_log is not None:
            metrics_log.write(dataset_metrics.validation_record(done, vname, loss, names, sums))


def _advice(s: cli.TrainSettings):
    """What a diverged run's stop message suggests, from the settings it ran with."""
    from jaxblend.training.divergence import DivergenceAdvice

    return DivergenceAdvice(
        remedy=(
            f"lower --lr (now {s.lr:g}), raise --lr_warmup_iters (now {s.lr_warmup_iters}) or "
            f"lower --clip_grad (now {s.clip_grad:g})"
        ),
        checkpoint_dir=s.checkpoint_dir,
    )


def _announce_stage(data: _Data, step: int, first: int, top: int) -> None:
    """Prints, on process 0, the stage of a `--data_schedule` that `step` begins (or resumes in)."""
    import jax

    if data.history is None or jax.process_index() != 0:
        return
    from jaxblend.training import dataset_metrics

    schedule = data.history.schedule
    k = schedule.stage_of(step)
    start = schedule.stages[k].start_step
    if step == first or start == step:
        print(dataset_metrics.stage_line(step, k, len(schedule.stages), schedule.stages[k].blend,
                                         top, resumed=start != step), flush=True)


def _run_steps(watch, loader, state: _Model, resume: _Resume, data: _Data, steps, mesh,
               batch_axes, s: cli.TrainSettings, window: _LogWindow, first_batch=None):
    """Trains from `resume.start` to `--train_iters`; returns (last loss, preempted step).

    `window`: the first log window (made before `first_batch` was taken); `first_batch`: the batch
    of step `resume.start` when it was already taken from `loader` (`_first_step`).

    The host reads the device's losses and per-dataset sums only at log lines, evaluations and
    checkpoints; a non-finite loss stops the run there (`jaxblend.training.divergence`), and a
    checkpoint is saved only after its losses and state are checked finite. Each log line is
    followed by a line of per-dataset losses and tokens (`jaxblend.training.dataset_metrics`),
    and with `--metrics_jsonl` process 0 writes both as one JSON record.
    """
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxblend.training import dataset_metrics
    from jaxblend.training.divergence import DivergedError, DivergenceGuard
    from jaxblend.training.preemption import PreemptionNotice

    train_step, eval_step = steps
    totals = dataset_metrics.RunTotals.restored(
        data.names, resume.meta, same_stream=resume.same_stream
    )
    if totals.note is not None:
        logging.warning("per-dataset figures: %s", totals.note)
    sums = dataset_metrics.DeviceWindow(len(data.names), NamedSharding(mesh, P()))
    metrics_log = None
    if s.metrics_jsonl and jax.process_index() == 0:
        from jaxblend.training.metrics_log import MetricsLog

        metrics_log = MetricsLog(s.metrics_jsonl, resume.start)
    preemption = PreemptionNotice()
    guard = DivergenceGuard(
        _advice(s), resume.start if resume.loader_state is not None else None
    )
    def peers(name: str) -> None:  # a validation set's step is compiled (`_evaluate`)
        watch.phase = "waiting for the other processes to compile"
        watch.wait_for_peers(name, flags.FLAGS.distributed_timeout)
        watch.phase = "training"

    window.start_clock()
    batches = loader if first_batch is None else itertools.chain([first_batch], loader)
    iters, seq = data.plan.num_steps, data.seq_length  # a phase of Megatron's ends before the run
    logging.info(
        "training %d steps from %d: batch %s x %d tokens (%d batch shapes), mesh %s, datasets %s",
        iters, resume.start, data.steps.final_global_batch_size, seq,
        len(data.plan.batch_shapes(resume.start)), dict(mesh.shape),
        data.names,
    )
    watch.phase = "training"
    loss, preempted_at = None, None
    try:
        for step in range(resume.start, iters):
            watch.step = step
            size = data.plan.batch_size(step)
            if sums.must_read_before(size * seq):  # int32 counters: only in huge log windows
                totals.absorb(sums.take())
            _announce_stage(data, step, resume.start, s.log_datasets)
            batch = next(batches)
            state.params, state.opt_state, step_loss, step_sums = train_step(
                state.params, state.opt_state, sums.sums, batch
            )
            sums.added(step_sums, size * seq)
            window.tokens += size * seq
            done = step + 1
            watch.step = done
            guard.record(done, step_loss)
            if done % s.log_interval == 0 or done == iters or step == resume.start:
                loss = guard.losses()
                totals.absorb(sums.take())
                figures = window.figures(loss, size)
                if jax.process_index() == 0:
                    print(window.line(done, figures, totals, s.log_datasets), flush=True)
                    print(dataset_metrics.dataset_line(done, totals, s.log_datasets), flush=True)
                    if loader_line := window.loader_line(done):
                        print(loader_line, flush=True)
                    if metrics_log is not None:
                        metrics_log.write(dataset_metrics.train_record(done, figures, totals))
                totals.end_window()
                window.reset()
            if data.steps.eval_interval and done % data.steps.eval_interval == 0:
                guard.losses()
                _evaluate(done, state.params, eval_step, data, mesh, batch_axes, s, metrics_log,
                          peers)
            preempt = preemption.reached(done)
            phase_end = done == iters < data.steps.train_iters  # saved whatever --save_interval
            if preempt or phase_end or (
                s.save_interval and (done % s.save_interval == 0 or done == iters)
            ):
                guard.check_state(done, (state.params, state.opt_state))
                totals.absorb(sums.take())
                resume.ckpt.save(
                    done, (state.params, state.opt_state), loader,
                    {"model": dataclasses.asdict(state.config), "data": data.record,
                     **totals.meta(),
                     **_phase_meta(data.plan)},
                )
                guard.saved(done)
            if preempt:
                preempted_at = done
                logging.warning("preempted: checkpointing step %d and stopping", done)
                break
    except DivergedError:
        resume.ckpt.close()  # commit the last (finite) checkpoint before the run stops
        raise
    finally:
        if metrics_log is not None:
            metrics_log.close()
    return loss, preempted_at


def _train(watch, s: cli.TrainSettings) -> None:
    _import_optax()
    try:
        from jaxblend.training import checkpoint
    except ModuleNotFoundError as err:
        raise app.UsageError(
            f"the training example saves Orbax checkpoints ({err}): pip install 'jaxblend[train]'"
        ) from None

    if s.metrics_jsonl:
        from jaxblend.training.metrics_log import check_path

        with usage_errors():
            check_path(s.metrics_jsonl)
    watch.phase = "preparing the data"
    resume = _Resume(checkpoint, s)
    try:
        _train_from(watch, s, resume)
    except BaseException:
        resume.close_unused()  # a run refused before saving leaves no checkpointer open
        raise


def _train_from(watch, s: cli.TrainSettings, resume: _Resume) -> None:
    """The run, from the phase plan to the last step (`_train`, once the flags are checked)."""
    import jax
    from jax.experimental import multihost_utils

    from jaxblend.loading import make_loader
    from jaxblend.mesh import default_batch_axes

    phase = _phase_plan(resume, s)
    run, vocab_size = _data_spec(s, phase)
    mesh = cli.mesh_from_flags()
    batch_axes = default_batch_axes(mesh.axis_names)
    data = _open_data(run, phase)
    _warn_about_data(run)
    watch.phase = "restoring the checkpoint"
    state = _model(s, data.steps.train_iters, vocab_size, mesh)
    _resume_point(resume, state)
    loader_state, phase_line = _enter_phase(resume, data.plan)
    resume.same_stream = loader_state is not None
    _check_same_data(resume, data, loader_state)

    watch.phase = "opening the data"
    prefetch = cli.prefetch_from_flags()
    loader = make_loader(
        data.train, mesh, plan=data.plan, batch_axes=batch_axes,
        prefetch=prefetch,
        state=loader_state, start_step=resume.start, history=data.history,
        telemetry=cli.telemetry_from_flags(),
    )
    if loader.step != resume.start:
        raise ValueError(f"checkpoint step {resume.start} but loader state step {loader.step}")
    # The first steps are read, and the step function compiled for the first batch, while the
    # arrays are restored (or initialized).
    loader.start_reading()
    window = _LogWindow(loader)
    train_step, eval_step = _compile_steps(state, len(data.names), mesh)
    first_step = _first_step(loader, train_step, state, len(data.names), mesh)
    try:
        watch.phase = "restoring the checkpoint" if resume.loader_state else "initializing the model"
        _restore_state(resume, state, flags.FLAGS.seed, phase_line)
        watch.phase = "compiling the training step"
        first_batch = first_step()
        # Every process enters the first step's collectives together (`PeerWatch.wait_for_peers`).
        watch.phase = "waiting for the other processes to compile"
        watch.wait_for_peers("first step", flags.FLAGS.distributed_timeout)
    except BaseException:
        loader.close()
        raise
    with _metrics_endpoint(loader):
        loss, preempted_at = _run_steps(
            watch, loader, state, resume, data, (train_step, eval_step), mesh, batch_axes, s,
            window, first_batch,
        )
    watch.phase = "saving the checkpoint"
    resume.ckpt.close()
    if jax.process_index() == 0:
        _print_outcome(preempted_at, loss, resume, data, s)
    watch.phase = "finishing"
    multihost_utils.sync_global_devices("train done")


@contextlib.contextmanager
def _metrics_endpoint(loader):
    """Serves the loader's figures to Prometheus during the block (`--metrics_port`)."""
    port = flags.FLAGS.metrics_port
    if not port:
        yield
        return
    from jaxblend.loading import serve_metrics

    try:
        server = serve_metrics(loader.metrics, port, flags.FLAGS.metrics_address)
    except OSError as err:
        raise app.UsageError(f"--metrics_port: {err}") from None
    logging.info("loader metrics at %s", server.url)
    try:
        yield
    finally:
        server.close()


def _print_outcome(
    preempted_at: int | None, loss, resume: _Resume, data: _Data, s: cli.TrainSettings
) -> None:
    """The run's last line: preempted, finished, or nothing left to train."""
    if preempted_at is not None:
        print(
            f"preempted: saved checkpoint step {preempted_at} in {resume.ckpt.directory}; exiting "
            "(rerun the same command, on any number of hosts, to resume)", flush=True,
        )
    elif loss is not None and data.plan.num_steps < data.steps.train_iters:
        print(phase_flags.relaunch_line(data.plan, resume.ckpt.directory), flush=True)
    elif loss is not None:
        print(f"finished at step {data.steps.train_iters}: final loss {float(loss):.4f}", flush=True)
    else:
        available = data.steps.covering(len(data.train)).num_steps
        print(
            f"already trained to step {resume.start} (checkpoint in {resume.ckpt.directory}); "
            f"raise --train_iters (the data stream holds {available} steps) to continue, or "
            "delete the directory to start over", flush=True,
        )


def _phase_plan(resume: _Resume, s: cli.TrainSettings) -> PhaseStepPlan | None:
    """With `--phase_transition_iterations`, the plan of the phase the run is in: the one holding
    the newest checkpoint's step (Megatron's phase transitions; the run's checkpointer, which the
    resume point then uses as it is); else None (nothing is opened)."""
    values = cli.read_flag_values()  # the step plan's values, before the run is assembled
    steps = cli.StepSettings.from_values(values)
    transitions = phase_flags.phase_transitions_from_flags(
        steps.global_batch_size, steps.train_iters, values.train_samples
    )
    if transitions is None:
        return None
    last = resume.latest
    start = 0 if last is None else last
    if start > steps.train_iters:
        raise app.UsageError(
            f"checkpoint {s.checkpoint_dir} is at step {start}, past "
            f"--train_iters={steps.train_iters}"
        )
    return transitions.plan(transitions.phase_of(start))


def _enter_phase(resume: _Resume, plan) -> tuple[dict | None, str | None]:
    """The loader state to resume from, and the line announcing a new phase (None: none). In one
    of Megatron's phases the global batch size must be the checkpoint's, and at a phase's first
    step the previous phase's stream (its loader state) ends: the phase reads its fresh blend
    from sample 0 (None). The per-dataset figures continue by dataset name (they count from step
    0 of the run)."""
    from jaxblend.sampling import PhaseStepPlan

    if not isinstance(plan, PhaseStepPlan) or resume.loader_state is None:
        return resume.loader_state, None
    recorded = (resume.meta or {}).get("global_batch_size")
    if recorded is None:
        logging.warning(
            "checkpoint %s step %d records no global batch size: cannot check that it is %d",
            resume.ckpt.directory, resume.start, plan.global_batch_size,
        )
    elif recorded != plan.global_batch_size:
        raise app.UsageError(
            f"--global_batch_size={plan.global_batch_size} but checkpoint "
            f"{resume.ckpt.directory} step {resume.start} was trained with {recorded}: "
            "--phase_transition_iterations requires a fixed global batch size (Megatron refuses "
            "the change too); pass "
            f"--global_batch_size={recorded}"
        )
    if resume.start != plan.first_step:
        return resume.loader_state, None
    return None, (
        f"phase {plan.phase + 1} of {plan.transitions.num_phases} from step {resume.start}: a "
        f"fresh blend of {plan.num_samples} samples from the data flags, read from its first "
        "sample"
    )


def _phase_meta(plan) -> dict:
    """What a checkpoint of one of Megatron's phases records (checked at resume)."""
    from jaxblend.sampling import PhaseStepPlan

    if not isinstance(plan, PhaseStepPlan):
        return {}
    return {"global_batch_size": plan.global_batch_size, "phase": plan.phase}


run = runner(main, cli.MEGATRON_NARGS, define=define_flags, quiet_logs=True)


if __name__ == "__main__":
    sys.exit(run())

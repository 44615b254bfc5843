r"""Inspect datasets, batches and blends without running the loader.

  python -m jaxblend.tools.inspect stats --data_path="30 /d/a 70 /d/b"
  python -m jaxblend.tools.inspect explain --step=N --global_batch_size=B <data flags>
  python -m jaxblend.tools.inspect mixture --start_step=0 --end_step=1000 --plot=mix.png <data flags>
  python -m jaxblend.tools.inspect preflight --global_batch_size=B --train_iters=T <data flags>
  python -m jaxblend.tools.inspect verify --data_path="30 /d/a 70 gs://b/c"

With `--rampup_batch_size` (Megatron's ramp-up), steps follow the ramp in every command.

* stats: documents, sequences, tokens and a document-length histogram per dataset.
* explain: for every row of global batch N, the dataset, document ids and token ranges of its
  sample, straight from the index maps (the loader's batch N holds exactly these tokens).
  With --decode, each row's text follows its pieces (one line, newlines shown as \n, at most
  --decode_chars characters), decoded with the tokenizer recorded with the data
  (`jaxblend.decode`; --tokenizer_type & co. for Megatron-made data). With --fim_data the text is
  the sample after its fill-in-the-middle rewrite, the sentinels shown as [FIM_PREFIX],
  [FIM_SUFFIX], [FIM_MIDDLE] and [FIM_PAD]; the tokens a conversation's loss mask does not
  train show inside ⟦ ⟧. With --packing=best_fit a row's documents are
  listed one per line ("document 1: ...", its boundaries) and its padding is counted.
  With --data_schedule, it first names the stage of step N and the stage's blend.
  With --phase_transition_iterations (Megatron's phases; needs --train_samples, the run's
  samples), step N is read from the phase holding it, a fresh blend of the phase's length given
  by the data flags (those of that phase's launch): it first names the phase, and the sample ids
  are the phase's own (its first step reads its sample 0), as a relaunched Megatron job reads.
* mixture: realized vs target share of each dataset over a step range, as a table and (with
  --plot, needs matplotlib) a PNG of the cumulative shares. With --data_schedule (a staged train
  split) one table per stage (the stage's target: its normalized blend weights; realized: the
  range's samples in the stage) and one over the range; the plot restarts the shares at each
  stage and draws the stage boundaries as labelled vertical lines; --json holds the stages.
  With --phase_transition_iterations the range must lie within one phase (the phases have
  different data flags: one command per phase) and the report is that phase's fresh blend.
* preflight: before training, estimated index-map memory/disk per split, token-dtype limits,
  epochs per dataset, missing caches, the number of distinct batch shapes (compiled programs);
  exits non-zero on problems. A training dataset shorter than one sequence, or repeated more
  than --warn_epochs epochs (default 16), is a WARNING line, and the last line then says
  `preflight: ok, with N warning(s)`.
* verify: reads every byte of each dataset's `.bin`, recomputes its MD5 and compares it with the
  store's checksum (GCS md5Hash, single-part S3 ETag) and the identity remembered for that file
  version; one line per dataset, exits non-zero on a mismatch (docs/robustness.md, "Dataset
  identity").

Data flags are those of `jaxblend.tools.dump_samples` (Megatron-LM names).

The training job's flagfile works as it is (`--flagfile=run.flags`): the flags of
`jaxblend.train` this tool does not use (model, optimizer, run, ...) are ignored, with one note
line naming them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

import numpy as np
from absl import app, flags

from jaxblend import atomic_write, cli
from jaxblend.cli import data_warnings, phase_flags, tool_flags
from jaxblend.tools import _training_flags


def define_flags() -> None:
    """The data, schema, source, step-plan and tokenizer flags, and the commands' options."""
    cli.define_data_flags()
    cli.define_schema_flags()
    cli.define_source_flags()
    cli.define_step_plan_flags()
    cli.define_tokenizer_flags()
    tool_flags.define_inspect_flags()
    tool_flags.define_decode_flags()
    phase_flags.define_phase_flags()
    data_warnings.define_data_warning_flags()


def _write_json(result) -> None:
    if flags.FLAGS.json:
        with atomic_write.atomic_file(flags.FLAGS.json, "w") as f:
            json.dump(result, f, indent=1, default=lambda x: x.item() if hasattr(x, "item") else str(x))


def stats() -> dict:
    """Per-dataset statistics and document-length histograms."""
    from jaxblend.storage import IndexedDataset

    access = cli.data_access_from_flags()
    result = {}
    for prefix in cli.prefixes_from_flags():
        ds = IndexedDataset(prefix, access=access)
        seq_lengths = np.asarray(ds.sequence_lengths, np.int64)
        cum = np.concatenate([[0], np.cumsum(seq_lengths)])
        doc_idx = np.asarray(ds.document_indices, np.int64)
        doc_tokens = cum[doc_idx[1:]] - cum[doc_idx[:-1]]
        edges = 2 ** np.arange(0, max(1, int(np.ceil(np.log2(max(int(doc_tokens.max(initial=1)), 1) + 1)))) + 1)
        hist, _ = np.histogram(doc_tokens, bins=np.concatenate([[0], edges]))
        result[prefix] = {
            "dtype": str(ds.dtype), "documents": int(doc_tokens.size), "sequences": int(seq_lengths.size),
            "tokens": int(cum[-1]), "bytes": int(cum[-1] * ds.dtype.itemsize),
            "mean_document_tokens": float(doc_tokens.mean()) if doc_tokens.size else 0.0,
            "median_document_tokens": float(np.median(doc_tokens)) if doc_tokens.size else 0.0,
            "max_document_tokens": int(doc_tokens.max(initial=0)),
            "histogram": [{"below": int(e), "documents": int(h)} for e, h in zip(edges, hist[:edges.size], strict=True)],
        }
        r = result[prefix]
        print(f"\n{prefix}  ({r['dtype']})")
        print(f"  documents {r['documents']:,}  sequences {r['sequences']:,}  tokens {r['tokens']:,}  "
              f"bytes {r['bytes']:,}")
        print(f"  document tokens: mean {r['mean_document_tokens']:.1f}  median "
              f"{r['median_document_tokens']:.0f}  max {r['max_document_tokens']:,}")
        top = max(hist.max(initial=1), 1)
        low = 0
        for e, h in zip(edges, hist, strict=False):
            if h:
                print(f"  [{low:>9,} , {e:>9,})  {h:>9,}  {'#' * max(1, int(40 * h / top))}")
            low = e
    return result


def _plan_and_names(run):
    """The split's index maps and dataset names in the assembled configuration `run` (with a
    phase, the train split built for that phase alone), from the map store: loaded, or built and
    cached, whatever kind of map store."""
    from jaxblend import index, opening
    from jaxblend.map_store import load_or_build_data_maps
    from jaxblend.sources.factory import validation_set_configs

    which = split = flags.FLAGS.which
    config = run.config
    if config is None:
        raise ValueError("inspect explain and mixture read the datasets' index maps: drop --mock_data")
    if which.startswith("valid_"):  # the k-th of --multiple_validation_sets
        sets = {}
        if config.multiple_validation_sets:
            configs = validation_set_configs(config)
            sets = {f"valid_{k}": one for k, one in enumerate(configs.values())}
        if which not in sets:
            raise ValueError(
                f"no validation set {which!r} (sets: {sorted(sets)}; valid_<k> needs "
                "--multiple_validation_sets)"
            )
        config, split = sets[which], "valid"
    _, infos = opening.open_datasets(index.config_prefixes(config), run.access)
    plan = load_or_build_data_maps(config, infos, run.access, (split,)).split(split)
    if plan is None or len(plan) == 0:
        raise ValueError(
            f"the data configuration has no {which!r} split (check --split and --{which}_samples)"
        )
    return plan, list(plan.dataset_names)


def _phase(first_step: int, end_step: int | None = None):
    """The `PhaseStepPlan` of the phase holding `first_step` with `--phase_transition_iterations`
    (train split only: validation and test splits are not phased), else None; refuses a range
    `[first_step, end_step)` crossing a transition (`phase_flags.inspect_phase_plan_from_flags`)."""
    if flags.FLAGS.which != "train":
        phase_flags.check_phase_combinations()
        return None
    return phase_flags.inspect_phase_plan_from_flags(
        flags.FLAGS.global_batch_size, first_step, end_step
    )


def explain() -> dict:
    """The pieces of every row of global batch --step."""
    from jaxblend import decode
    from jaxblend.decode import shorten
    from jaxblend.storage import IndexedDataset

    step = flags.FLAGS.step
    phase = _phase(step)
    access = cli.data_access_from_flags()
    decoder = None
    if flags.FLAGS.decode:  # before any work: a tokenizer that cannot be found fails at once
        decoder = cli.decoder_from_flags(cli.prefixes_from_flags(), access)
    run = cli.checked_run_config_from_flags(phase=phase)
    plan, names = _plan_and_names(run)
    fim = None
    if decoder is not None and run.schema.fim is not None:  # the rewritten windows, sentinels shown
        from jaxblend.sources.fim import open_fim_transform

        fim = open_fim_transform(run.schema.fim, names, run.config.seed, access)
        decoder = decoder.with_marks(fim.tokens.marks())
    steps = phase if phase is not None else run.steps.covering(len(plan))
    if step >= steps.num_steps:
        raise app.UsageError(
            f"step {step} exceeds the {flags.FLAGS.which} split's {len(plan)} samples "
            f"({steps.num_steps} steps of --global_batch_size={flags.FLAGS.global_batch_size})"
        )
    samples = steps.sample_ids(step)
    b = samples.size
    opened = {n: IndexedDataset(n, access=access) for n in dict.fromkeys(names)}
    masks = decode.open_loss_masks(opened, access) if decoder is not None else {}
    doc_indices = {n: np.asarray(ds.document_indices) for n, ds in opened.items()}
    stages = _stages_of_step(run, step, samples, names, len(plan), steps)
    phased = None if phase is None else _phase_of_step(phase, step, samples)
    rows = []
    print(f"global batch {step} ({flags.FLAGS.which}, B={b}): row  sample  dataset  pieces (document/sequence [start:stop))")
    for r, sample in enumerate(samples.tolist()):
        dataset_id, local = plan.locate(sample)
        pieces = []
        for p in plan.pieces(sample):
            name = names[p.dataset_id]
            doc = int(np.searchsorted(doc_indices[name], p.sequence_id, side="right") - 1)
            pieces.append({"dataset_id": int(p.dataset_id), "document": doc, "sequence": int(p.sequence_id),
                           "start": int(p.start), "stop": int(p.stop)})
        rows.append({"row": r, "sample_id": sample, "dataset_id": int(dataset_id),
                     "dataset": names[dataset_id], "dataset_sample": int(local), "pieces": pieces})
        text = " ".join(f"d{q['document']}/s{q['sequence']}[{q['start']}:{q['stop']})" for q in pieces)
        if plan.is_packed:  # a packed row: whole documents, then padding
            rows[-1]["padding"] = plan.window - sum(q["stop"] - q["start"] for q in pieces)
            text += f"  + {rows[-1]['padding']} padding"
        print(f"{r:4d} {sample:8d}  {os.path.basename(names[dataset_id])}  {text}")
        if decoder is None:
            continue
        read = [_piece(opened, masks, names[q["dataset_id"]], q) for q in pieces]
        split = flags.FLAGS.which.split("_")[0]  # valid_<k> reads as valid
        if plan.is_packed:  # one line per document: the boundaries
            if fim is not None:  # each document rewritten in its own places
                read = [(fim.rewrite_document(np.asarray(t, np.int64), split, sample, j), w)
                        for j, (t, w) in enumerate(read)]
            rows[-1]["texts"] = [decoder.detokenize(t, w) for t, w in read]
            for j, piece_text in enumerate(rows[-1]["texts"], start=1):
                print(f"      document {j}: {shorten(piece_text, flags.FLAGS.decode_chars)}")
            continue
        tokens = np.concatenate([np.zeros(0, np.int64)] + [t for t, _ in read])
        weights = None
        if fim is not None:  # the rewritten sample (conversations are not rewritten)
            tokens = fim.rewrite(tokens, split, sample, run.schema.megatron_compat)
        elif any(w is not None for _, w in read):  # a conversation: untrained text marked
            weights = np.concatenate([np.zeros(0, np.uint8)] + [
                np.ones(len(t), np.uint8) if w is None else w for t, w in read])
        rows[-1]["text"] = decoder.detokenize(tokens, weights)
        print(f"      text: {shorten(rows[-1]['text'], flags.FLAGS.decode_chars)}")
    result = {"step": step, "global_batch_size": b, "split": flags.FLAGS.which, "datasets": names,
              "rows": rows}
    if stages is not None:
        result["stages"] = stages
    if phased is not None:
        result["phase"] = phased
    return result


def _piece(opened: dict, masks: dict, name: str, q: dict):
    """(tokens, loss mask or None) of one piece of a row."""
    where = {"offset": q["start"], "length": q["stop"] - q["start"]}
    mask = masks.get(name)
    return (opened[name].get(q["sequence"], **where),
            None if mask is None else mask.get(q["sequence"], **where))


def _phase_of_step(phase, step: int, samples: np.ndarray) -> dict:
    """Prints and returns the phase holding `step` (a `PhaseStepPlan`) and where the step's
    in-phase `samples` lie in the phase's fresh blend and in the whole run."""
    shift = phase.transitions.sample_range(phase.phase)[0]
    lo, hi = int(samples[0]), int(samples[-1]) + 1
    print(f"step {step}: {phase_flags.phase_label(phase)}, in-phase samples [{lo}, {hi}) "
          f"(run samples [{lo + shift}, {hi + shift}))")
    return {**phase_flags.phase_json(phase), "in_phase_samples": [lo, hi],
            "step_run_samples": [lo + shift, hi + shift]}


def _stages_of_step(
    run, step: int, samples: np.ndarray, names, num_samples: int, steps
) -> list[dict] | None:
    """For a staged train split: prints and returns the stage(s) holding the step's `samples`
    (one, unless a stage starts inside the step) with their blends; else None."""
    from jaxblend.tools import _mixture

    schedule = _train_schedule(run)
    if schedule is None:
        return None
    spans = _mixture.stage_spans(schedule, names, num_samples, steps)
    first = schedule.stage_of(int(samples[0]))
    last = schedule.stage_of(int(samples[-1]))
    out = []
    for span in spans[first:last + 1]:
        rows = [r for r, sample in enumerate(samples.tolist())
                if span.start_sample <= sample < span.stop_sample]
        out.append({**span.to_json(), "rows": [rows[0], rows[-1] + 1]})
        within = "" if first == last else f" (rows [{rows[0]}, {rows[-1] + 1}))"
        print(f"step {step}{within}: {span.label()} of {len(spans)}, blend {' '.join(span.blend)}")
    return out


def _target_weights(cfg, names: Sequence[str], plan) -> np.ndarray:
    parsed = cfg.split_blend(flags.FLAGS.which.split("_")[0])  # a Blend, parsed with the config
    if parsed.weights is not None and len(parsed.weights) == len(names):
        w = np.asarray(parsed.weights, np.float64)
    else:  # weighted by size (unweighted blends)
        w = np.asarray([plan.dataset_length(j) for j in range(len(names))], np.float64)
    return w / w.sum()


def _train_schedule(run):
    """The staged blend of the train split of `run` (`--data_schedule`), or None (other splits,
    mock data, or a train split without stages)."""
    if flags.FLAGS.which != "train" or run.config is None:
        return None
    return run.config.train_schedule


def mixture() -> dict:
    """Realized vs target dataset shares over [--start_step, --end_step), per stage of a staged
    train split (`jaxblend.tools._mixture`)."""
    from jaxblend.tools import _mixture

    start = flags.FLAGS.start_step
    phase = _phase(start, flags.FLAGS.end_step)
    run = cli.checked_run_config_from_flags(phase=phase)
    plan, names = _plan_and_names(run)
    steps, first = (run.steps.covering(len(plan)), 0) if phase is None else (phase, phase.first_step)
    end = flags.FLAGS.end_step if flags.FLAGS.end_step is not None else steps.num_steps
    if not first <= start < end <= steps.num_steps:
        raise app.UsageError(f"step range [{start}, {end}) outside [{first}, {steps.num_steps})")
    sizes = np.array([steps.batch_size(k) for k in range(start, end)], np.int64)
    samples = np.concatenate([steps.sample_ids(k) for k in range(start, end)])
    ids = plan.dataset_ids(samples).astype(np.int64)
    schedule = _train_schedule(run)
    spans = target = None
    if schedule is None:
        target = _target_weights(run.config, names, plan)
    else:
        spans = _mixture.stage_spans(schedule, names, len(plan), steps)
    label = None
    if phase is not None:
        label = phase_flags.phase_label(phase)
        print(f"{label}: steps [{start}, {end}) read its samples [{int(samples[0])}, "
              f"{int(samples[-1]) + 1}); target: the phase's blend")
    result = _mixture.report(names, samples, ids, target, spans, start, end, flags.FLAGS.which)
    if phase is not None:
        result["phase"] = {**phase_flags.phase_json(phase),
                           "in_phase_samples": [int(samples[0]), int(samples[-1]) + 1]}
    if flags.FLAGS.plot:
        lines = _mixture.plot(
            flags.FLAGS.plot, names, ids, sizes, target, spans, start, end, flags.FLAGS.which,
            note=label,
        )
        if spans is not None:
            result["plot_stage_lines"] = lines
        print(f"wrote {flags.FLAGS.plot}")
    return result


def verify() -> dict:
    """Full content verification of every dataset of --data_path (and the per-split paths)."""
    from jaxblend.storage import IndexedDataset
    from jaxblend.storage.dataset_identity.verify import verify_dataset

    access = cli.data_access_from_flags()
    result = {}
    for prefix in dict.fromkeys(cli.prefixes_from_flags()):
        checked = verify_dataset(IndexedDataset(prefix, access=access))
        print(checked.line(), flush=True)
        result[prefix] = {
            "ok": checked.ok, "bin_bytes": checked.bin_bytes, "md5": checked.read_md5,
            "store_md5": checked.store_md5, "store_source": checked.store_source,
            "fingerprint": checked.fingerprint, "remembered": checked.remembered,
            "problems": list(checked.problems),
        }
    return result


def preflight() -> dict:
    """The checks before training (`jaxblend.tools._preflight`); a blend of different tokenizers
    is one of the problems reported."""
    from jaxblend.tokenizer_facts import TokenizerMismatchError
    from jaxblend.tools import _preflight

    fl = flags.FLAGS
    mixed = []

    def tokenizer(config, access):
        try:
            return cli.run_tokenizer_from_flags(config, access)
        except TokenizerMismatchError as err:
            mixed.append(str(err))
            return cli.RunTokenizer({})

    run = cli.run_config_from_flags(tokenizer=tokenizer)
    recorded = run.tokenizer
    return _preflight.run(
        run.config, run.access, run.steps.planned(run.steps.train_iters),
        fl.vocab_size if fl.vocab_size is not None else recorded.vocab_size, fl.max_index_gb,
        tokenizer=_preflight.TokenizerCheck(
            recorded.facts, run.schema.eod_id, run.schema.pad_id, mixed[0] if mixed else None,
        ),
        warn_epochs=fl.warn_epochs,
    )


def _check_output_directories() -> None:
    """Fails before any work when the directory of `--plot` or `--json` does not exist."""
    for name in ("plot", "json"):
        path = flags.FLAGS[name].value
        directory = os.path.dirname(os.path.abspath(path)) if path else None
        if directory and not os.path.isdir(directory):
            raise app.UsageError(f"--{name}={path}: directory {directory} does not exist")


def main(argv: Sequence[str]) -> None:
    commands = {"stats": stats, "explain": explain, "mixture": mixture, "preflight": preflight,
                "verify": verify}
    if len(argv) != 2 or argv[1] not in commands:
        raise app.UsageError(
            f"unknown command {argv[1]!r}; the commands are {', '.join(commands)}"
            if len(argv) == 2 else f"give one command: {', '.join(commands)}"
        )
    command = argv[1]
    _check_output_directories()
    result = commands[command]()
    _write_json(result)
    if command == "preflight" and result["problems"]:
        sys.exit(1)
    if command == "verify" and (bad := [p for p, r in result.items() if not r["ok"]]):
        raise ValueError(
            f"{len(bad)} of {len(result)} datasets failed verification ({', '.join(bad)}); see "
            "the MISMATCH lines above"
        )


run = _training_flags.data_tool_run(main, define_flags, takes_args=True)


if __name__ == "__main__":
    sys.exit(run())

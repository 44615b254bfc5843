"""absl data flags named after Megatron-LM's, shared by every CLI: the blends (`--data_path`,
the per-split paths, Megatron's data-args files, `--data_schedule`), `--split`, `--seq_length`,
`--seed`, the sample counts (omitted: derived from the step-plan flags, `jaxblend.cli.steps`, the
same in every tool and training), packing, validation sets, the index-map cache and the
object-store flags (`jaxblend.access.ObjectStoreOptions`); `--help` describes each.

`define_data_flags()` is called once, by an entry point before absl parses. Their values
(`jaxblend.cli.flag_values.read_flag_values`) are assembled, with the step-plan, source and schema
flags' values, by `jaxblend.cli.assembly.assemble` into the run's `jaxblend.access.DataAccess`
(how the data is reached) and `jaxblend.index.GPTDataConfig` (what it is); `blends_from_values`
reads the blend flags' values (and Megatron's data-args files).
"""

from __future__ import annotations

from absl import flags

from jaxblend import data_args, index
from jaxblend.cli import flag_help, object_store_flags
from jaxblend.cli.flag_values import DataFlagValues

_BLEND_FLAGS = ("train_data_path", "valid_data_path", "test_data_path")
# Megatron-LM spells these as space-separated lists (`--data-path 0.3 /d/a 0.7 /d/b`).
MEGATRON_NARGS = ("data_path", *_BLEND_FLAGS)


def define_data_flags() -> None:
    """Defines the data flags (absl refuses a second definition: call it once per program)."""
    with flag_help.group(flag_help.DATA):
        _define_blend_flags()
    with flag_help.group(flag_help.SCHEMA):
        flags.DEFINE_integer(
            "seq_length", None,
            "Tokens per sample S (required to read samples; inspect stats and verify do "
            "without).",
        )
        flags.DEFINE_bool(
            "add_extra_token_to_sequence", True,
            "Samples of S + 1 tokens (inputs/targets shifted).",
        )
        flags.DEFINE_bool(
            "drop_last_partial_validation_sequence", True,
            "Drop the valid split's last partial sample.",
        )
    with flag_help.group(flag_help.STORAGE):
        flags.DEFINE_string(
            "data_cache_path", None,
            "Index-map cache: a local directory, or a bucket URL (gs://, s3://) shared by all "
            "hosts (default: none, the maps are built in memory; the training example uses "
            "<workdir>/index_cache).",
        )
        flags.DEFINE_string(
            "data_cache_mirror", None,
            "Local directory of index maps downloaded from a bucket --data_cache_path "
            "(default: $JAXBLEND_INDEX_MIRROR, else <tmp>/jaxblend-index-mirror).",
        )
        flags.DEFINE_float(
            "data_cache_wait", 900.0,
            "Seconds a process waits for process 0 to publish the index maps to a bucket cache.",
            lower_bound=0.001,
        )
        object_store_flags.define_object_store_flags()


def _define_blend_flags() -> None:
    """What is read: the blends, the splits, the sample counts, the seed."""
    flags.DEFINE_list(
        "data_path",
        None,
        'Blend: "30 /d/a 70 /d/b" (one string), 30,/d/a,70,/d/b, or a single prefix (default: '
        "the per-split blends; the training example builds its demo corpus without either).",
    )
    for name in _BLEND_FLAGS:
        flags.DEFINE_list(
            name, None,
            f"Blend of the {name.split('_')[0]} split only, instead of --data_path (default: none, "
            "the splits come from --data_path and --split).",
        )
    flags.DEFINE_string(
        "data_args_path", None,
        "File holding the --data_path blend (whitespace-separated), instead of --data_path "
        "(default: none).",
    )
    flags.DEFINE_string(
        "per_split_data_args_path",
        None,
        'JSON file {"train": [...], "valid": [...], "test": [...]} of per-split blends, instead '
        "of --train_data_path & co. (default: none).",
    )
    flags.DEFINE_string(
        "data_schedule", None,
        'JSON file (local path, gs:// or s3:// URL) of the train split\'s mixture over steps: '
        '{"stages": [{"start_step": 0, "blend": ["50", "/d/a", "50", "/d/b"]}, {"start_step": '
        '100, "blend": [...]}]}. Replaces the train blend; --data_path/--split or '
        "--valid_data_path/--test_data_path still give the validation and test splits. The "
        "train split holds --train_samples samples (default: those of --train_iters steps).",
    )
    flags.DEFINE_string("split", "969,30,1", "train,valid,test proportions (with --data_path).")
    flags.DEFINE_integer("seed", 1234, "RandomState seed of every dataset and split.")
    flags.DEFINE_integer(
        "train_samples", None,
        "Training samples (default: the samples of --train_iters steps of --global_batch_size, "
        "or of the batch-size ramp or schedule).",
    )
    flags.DEFINE_integer(
        "valid_samples", None,
        "Validation samples (default: --eval_iters batches of the final global batch size; 0 "
        "with --eval_interval=0).",
    )
    flags.DEFINE_integer("test_samples", None, "Test samples (default: 0).")
    flags.DEFINE_float(
        "mid_level_dataset_surplus", 0.005, "Extra samples built per blended dataset."
    )
    flags.DEFINE_enum(
        "packing", "concat", ["concat", "best_fit"],
        "How samples are made: concat (Megatron's: documents concatenated and cut every "
        "seq_length + extra tokens) or best_fit (whole documents packed into rows, best-fit "
        "decreasing; longer documents cut into row-sized pieces; docs/samples.md).",
    )
    flags.DEFINE_integer(
        "packing_window", 16384, "With --packing=best_fit: documents packed together.",
        lower_bound=1,
    )
    flags.DEFINE_enum(
        "packing_overflow", "cut", ["cut", "truncate", "drop"],
        "With --packing=best_fit: a document longer than a row is cut into row-sized pieces "
        "(cut), kept to its first row (truncate: conversations, docs/conversations.md) or "
        "dropped (drop); counted either way.",
    )
    flags.DEFINE_bool(
        "multiple_validation_sets",
        False,
        "Each prefix of the validation blend is its own validation set (per-split blends only).",
    )
    flags.DEFINE_bool(
        "full_validation", False, "With --multiple_validation_sets: one whole epoch of each set."
    )


def _blend(value: tuple[str, ...] | None, flag: str) -> index.Blend | None:
    """The `Blend` of a blend flag's value (None: not given), refused naming `--flag`."""
    if not value:
        return None
    return index.parse_optional_blend(value, f"--{flag}")


def blends_from_values(
    fl: DataFlagValues,
    default_blend: tuple[str, ...] | None = None,
    scheduled: bool = False,
) -> tuple[tuple[str, ...] | None, tuple[tuple[str, ...] | None, ...]]:
    """(--data_path blend, per-split blends) of the flags' values `fl`, checked to be exactly one
    of the two forms.

    Megatron's data-args files (`--data_args_path`, `--per_split_data_args_path`) stand in for
    `--data_path` and the per-split paths; `default_blend` stands in when no data path is given.
    With `scheduled` (`--data_schedule` gives the train blend) a train blend of the per-split
    form is refused and no blend at all is accepted (the run then has no valid/test splits).
    """
    per_split = tuple(_blend(getattr(fl, name), name) for name in _BLEND_FLAGS)
    blend = _blend(fl.data_path, "data_path")
    if fl.data_args_path:
        if blend is not None:
            raise ValueError("--data_args_path excludes --data_path")
        blend = data_args.read_data_args(fl.data_args_path)
    if fl.per_split_data_args_path:
        if any(b is not None for b in per_split):
            raise ValueError(
                "--per_split_data_args_path excludes --train_data_path/--valid_data_path/"
                "--test_data_path"
            )
        per_split = data_args.read_per_split_data_args(fl.per_split_data_args_path)
    if blend is not None and any(b is not None for b in per_split):
        raise ValueError(
            "--data_path excludes --train_data_path/--valid_data_path/--test_data_path"
        )
    if scheduled:
        if per_split[0] is not None:
            given = (
                "--per_split_data_args_path's \"train\" entry" if fl.per_split_data_args_path
                else "--train_data_path"
            )
            raise ValueError(
                f"--data_schedule gives the train split's blend and so does {given}: drop one "
                "(--valid_data_path/--test_data_path or --data_path/--split still give the "
                "validation and test splits)"
            )
        return blend, per_split
    if blend is None and all(b is None for b in per_split) and default_blend:
        blend = tuple(default_blend)
    if blend is None and all(b is None for b in per_split):
        raise ValueError("give --data_path or --train_data_path/--valid_data_path/--test_data_path")
    return blend, per_split

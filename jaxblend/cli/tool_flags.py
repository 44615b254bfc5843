"""The flags of one tool each (`jaxblend.tools.*`): outputs, step ranges, commands' options.

Each `define_<tool>_flags()` is called by that tool's entry point; the data, schema, source,
mesh, step-plan, loader and distributed flags the tool also takes come from their own groups.
"""

from __future__ import annotations

from absl import flags

from jaxblend.cli import flag_help

_WHICH_HELP = "Split: train, valid, test, or valid_<k> (--multiple_validation_sets)."


def define_decode_flags() -> None:
    """`--decode` and `--decode_chars` (dump_samples, dump_batches, inspect explain)."""
    with flag_help.group(flag_help.OUTPUT):
        flags.DEFINE_bool(
            "decode", False,
            "Also show samples as text, decoded with the tokenizer recorded with the data (its "
            "files checked by SHA-256), or of --tokenizer_type & co. for data without a record.",
        )
        flags.DEFINE_integer(
            "decode_chars", 200,
            "inspect explain --decode: characters of text shown per row (0: all).", lower_bound=0,
        )


def define_dump_samples_flags() -> None:
    """`jaxblend.tools.dump_samples`: `--num`, `--out`."""
    with flag_help.group(flag_help.OUTPUT):
        flags.DEFINE_string("out", None, "Output directory (required).")
        flags.DEFINE_integer("num", 16, "Samples to dump per split.", lower_bound=0)


def define_dump_batches_flags() -> None:
    """`jaxblend.tools.dump_batches`: the steps to dump, the split, the output and states."""
    with flag_help.group(flag_help.OUTPUT):
        flags.DEFINE_string("out", None, "Output directory (required).", required=True)
        flags.DEFINE_integer("steps", 4, "Number of global batches to dump.", lower_bound=1)
        flags.DEFINE_integer("start_step", 0, "First global step.", lower_bound=0)
        flags.DEFINE_string("which", "train", _WHICH_HELP)
        flags.DEFINE_string(
            "state_in", None, "Loader state JSON to resume from (default: start at --start_step)."
        )
        flags.DEFINE_string(
            "state_out", None, "Where process 0 writes the final loader state (default: nowhere)."
        )


def define_inspect_flags() -> None:
    """`jaxblend.tools.inspect`: the options of its commands."""
    with flag_help.group(flag_help.COMMANDS):
        flags.DEFINE_string("which", "train", _WHICH_HELP)
        flags.DEFINE_integer("step", 0, "explain: the global step.", lower_bound=0)
        flags.DEFINE_integer("start_step", 0, "mixture: first step.", lower_bound=0)
        flags.DEFINE_integer(
            "end_step", None,
            "mixture: end step (exclusive; default: the end of the split, or of the phase).",
        )
        flags.DEFINE_string("plot", None, "mixture: write a PNG plot here (default: no plot).")
        flags.DEFINE_integer(
            "vocab_size", None,
            "preflight: the model vocabulary (default: the one recorded with the datasets by "
            "jaxblend.tools.preprocess, or of --tokenizer_type).",
        )
        flags.DEFINE_float(
            "max_index_gb", 64.0, "preflight: fail above this index-map size."
        )
    with flag_help.group(flag_help.OUTPUT):
        flags.DEFINE_string("json", None, "Also write the result as JSON here (default: not written).")


def define_launch_local_flags() -> None:
    """`jaxblend.tools.launch_local`: the launcher's own flags. Its `--num_processes` means
    "processes to start", so a program never defines these and the distributed flags together."""
    with flag_help.group(flag_help.PROCESSES):
        flags.DEFINE_integer("num_processes", 2, "Processes to start.", lower_bound=1)
        flags.DEFINE_integer("devices_per_process", 4, "CPU devices per process.", lower_bound=1)
        flags.DEFINE_float("timeout", 3600, "Seconds before all processes are killed.")

"""Source flags (synthetic data, storage backend) and the sources of an assembled configuration.

`define_source_flags()` defines `--mock_data`, `--mock_num_samples`, `--mock_vocab_size` and
`--storage_backend`. `open_source(split, run)` opens a split's source of a `RunConfig`
(`jaxblend.cli.assembly.assemble`; `checked_run_config_from_flags()` assembles the program's
flags).
"""

from __future__ import annotations

from absl import flags

from jaxblend.access import BACKENDS
from jaxblend.cli import flag_help, tokenizer_flags
from jaxblend.cli.assembly import RunConfig, run_config_from_flags

__all__ = [
    "checked_run_config_from_flags",
    "define_source_flags",
    "history_of",
    "open_source",
    "open_validation_sources",
]


def define_source_flags() -> None:
    """Defines the mock-data and storage-backend flags."""
    with flag_help.group(flag_help.DATA):
        flags.DEFINE_bool("mock_data", False, "Use synthetic samples instead of --data_path.")
        flags.DEFINE_integer("mock_num_samples", 1 << 20, "Samples of the mock source.", lower_bound=1)
        flags.DEFINE_integer("mock_vocab_size", 32000, "Vocabulary size of the mock source.")
    with flag_help.group(flag_help.STORAGE):
        flags.DEFINE_enum(
            "storage_backend", "auto", list(BACKENDS),
            "How .bin files are read (auto: memory-mapped when local, TensorStore from a bucket).",
        )


def open_source(split: str, run: RunConfig):
    """The source of `split` ("train", "valid", "test", or "valid_<k>") of `run`.

    With a bucket map store the source starts from the publication (`open_gpt_sources`).

    Args:
      split: the split; "valid_<k>" is the k-th of `--multiple_validation_sets`.
      run: the assembled configuration (its data, schema, access, mock data).

    Raises:
      ValueError: if the configuration has no such split.
    """
    from jaxblend.sources import MockSource, open_gpt_sources

    if run.mock is not None:
        m = run.mock
        return MockSource(
            m.num_samples, run.schema, seq_length=m.seq_length,
            add_extra_token_to_sequence=m.add_extra_token_to_sequence, vocab_size=m.vocab_size,
            seed=m.seed,
        )
    if split.startswith("valid_"):
        sets = open_validation_sources(run)
        if split not in sets:
            raise ValueError(
                f"no validation set {split!r} (sets: {sorted(sets)}; valid_<k> needs "
                "--multiple_validation_sets)"
            )
        return sets[split]
    sources = open_gpt_sources(
        run.config, run.schema, access=run.access, splits=(split,)
    )
    if sources.get(split) is None:
        raise ValueError(
            f"the data configuration has no {split!r} split (check --split and --{split}_samples)"
        )
    return sources[split]


def open_validation_sources(run: RunConfig) -> dict:
    """The validation source(s) of `run`: `{"valid": source}`, or one per set with
    `--multiple_validation_sets` (`{"valid_0": ..., "valid_1": ...}` in blend order).

    Raises:
      ValueError: if the configuration has no validation split.
    """
    if run.mock is not None or not run.config.multiple_validation_sets:
        return {"valid": open_source("valid", run)}
    from jaxblend.sources import open_validation_sets

    sets = open_validation_sets(run.config, run.schema, access=run.access)
    return {f"valid_{k}": source for k, source in enumerate(sets.values())}


def checked_run_config_from_flags(**options) -> RunConfig:
    """`run_config_from_flags(**options)`; in a program with the tokenizer flags
    (`define_tokenizer_flags`) the EOD id defaults to the datasets' recorded one, and ids outside
    their recorded vocabulary are refused.

    Raises:
      TokenizerMismatchError: the datasets come from different tokenizers, or the EOD or pad id
        is outside their vocabulary.
    """
    if "allow_mixed_tokenizers" in flags.FLAGS:
        options.setdefault("tokenizer", tokenizer_flags.run_tokenizer_from_flags)
    run = run_config_from_flags(**options)
    recorded = run.tokenizer
    if recorded is not None and recorded.vocab_size is not None:
        from jaxblend.tokenizer_facts import check_ids

        check_ids(
            recorded.vocab_size, run.schema.eod_id, run.schema.pad_id, {},
            vocab_label="the datasets' recorded vocabulary of ",
        )
    return run


def history_of(split: str, source, run: RunConfig):
    """The resume history (`jaxblend.loading.StagedHistory`) of `source`, the `split` source of
    `run`, when it is a `--data_schedule` train split; else None (the loader then checks the
    whole source). The history takes the source's schema options and its datasets'
    fingerprints: nothing is opened again."""
    if split != "train" or run.schedule is None:
        return None
    from jaxblend.loading.resume_history import gpt_train_history

    return gpt_train_history(run.schedule, run.config, source)

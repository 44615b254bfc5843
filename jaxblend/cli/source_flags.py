"""Source flags (synthetic data, storage backend) and the sources the data flags describe.

`define_source_flags()` defines `--mock_data`, `--mock_num_samples`, `--mock_vocab_size` and
`--storage_backend`; with the data flags (`define_data_flags`) and the schema flags
(`define_schema_flags`), `source_from_flags(split)` opens a split's source. Programs that compute
part of the configuration themselves (the training example) build the pieces and call
`open_source` / `open_validation_sources` with them.
"""

from __future__ import annotations

import dataclasses

from absl import flags

from jaxblend import index
from jaxblend.access import BACKENDS, DataAccess
from jaxblend.cli import data_flags, schema_flags
from jaxblend.cli.access_flags import data_access_from_flags


def define_source_flags() -> None:
    """Defines the mock-data and storage-backend flags."""
    flags.DEFINE_bool("mock_data", False, "Use synthetic samples instead of --data_path.")
    flags.DEFINE_integer("mock_num_samples", 1 << 20, "Samples of the mock source.", lower_bound=1)
    flags.DEFINE_integer("mock_vocab_size", 32000, "Vocabulary size of the mock source.")
    flags.DEFINE_enum("storage_backend", "auto", list(BACKENDS), "How .bin files are read.")


@dataclasses.dataclass(frozen=True)
class MockSettings:
    """A synthetic source (`jaxblend.sources.MockSource`) instead of datasets.

    Attributes:
      num_samples: samples of the source.
      vocab_size: token ids are drawn below this.
      seed: the source's random seed.
    """

    num_samples: int
    vocab_size: int
    seed: int

    def __post_init__(self) -> None:
        if self.num_samples < 1 or self.vocab_size < 1:
            raise ValueError(
                f"--mock_num_samples and --mock_vocab_size must be >= 1, got {self.num_samples} "
                f"and {self.vocab_size}"
            )


@dataclasses.dataclass(frozen=True)
class SourceSettings:
    """How sources are opened from a data configuration.

    Attributes:
      mock: synthetic data instead of the configuration's datasets (None: real data).
      access: where and how the datasets and their index maps are reached.
      multiple_validation_sets: each prefix of the validation blend is its own set.
      full_validation: with `multiple_validation_sets`, one whole epoch of each set.
    """

    mock: MockSettings | None = None
    access: DataAccess = dataclasses.field(default_factory=DataAccess)
    multiple_validation_sets: bool = False
    full_validation: bool = False


def source_settings_from_flags(default_map_location: str | None = None) -> SourceSettings:
    """The `SourceSettings` of the source, data and storage flags.

    Args:
      default_map_location: where index maps are cached when `--data_cache_path` is not given.
    """
    fl = flags.FLAGS
    mock = None
    if fl.mock_data and "data_schedule" in fl and fl.data_schedule:
        raise ValueError(
            f"--data_schedule={fl.data_schedule} blends datasets but --mock_data replaces them "
            "with synthetic samples: drop one of the two"
        )
    if fl.mock_data:
        mock = MockSettings(fl.mock_num_samples, fl.mock_vocab_size, fl.seed)
    return SourceSettings(
        mock=mock,
        access=data_access_from_flags(default_map_location),
        multiple_validation_sets=fl.multiple_validation_sets,
        full_validation=fl.full_validation,
    )


def open_source(
    split: str,
    config: index.GPTDataConfig | None,
    options,
    settings: SourceSettings,
):
    """The source of `split` ("train", "valid", "test", or "valid_<k>").

    With a bucket map store the source starts from the publication (`open_gpt_sources`).

    Args:
      split: the split; "valid_<k>" is the k-th of `multiple_validation_sets`.
      config: the data configuration (unused, may be None, with `settings.mock`).
      options: the `jaxblend.sources.GPTSchemaOptions` of the samples.
      settings: mock data, data access and validation sets.

    Raises:
      ValueError: if the configuration has no such split.
    """
    from jaxblend.sources import MockSource, open_gpt_sources

    if settings.mock is not None:
        m = settings.mock
        return MockSource(m.num_samples, options, vocab_size=m.vocab_size, seed=m.seed)
    if split.startswith("valid_"):
        sets = open_validation_sources(config, options, settings)
        if split not in sets:
            raise ValueError(
                f"no validation set {split!r} (sets: {sorted(sets)}; valid_<k> needs "
                "--multiple_validation_sets)"
            )
        return sets[split]
    sources = open_gpt_sources(
        config, options, access=settings.access, splits=(split,)
    )
    if sources.get(split) is None:
        raise ValueError(
            f"the data configuration has no {split!r} split (check --split and --{split}_samples)"
        )
    return sources[split]


def open_validation_sources(
    config: index.GPTDataConfig | None, options, settings: SourceSettings
) -> dict:
    """The validation source(s): `{"valid": source}`, or one per set with
    `multiple_validation_sets` (`{"valid_0": ..., "valid_1": ...}` in blend order).

    Raises:
      ValueError: if the configuration has no validation split.
    """
    if not settings.multiple_validation_sets or settings.mock is not None:
        return {"valid": open_source("valid", config, options, settings)}
    from jaxblend.sources import open_validation_sets

    sets = open_validation_sets(
        config, options, access=settings.access, full_validation=settings.full_validation
    )
    return {f"valid_{k}": source for k, source in enumerate(sets.values())}


def _config_from_flags(settings: SourceSettings) -> index.GPTDataConfig | None:
    return None if settings.mock is not None else data_flags.data_config_from_flags()


def _schema_from_flags(config: index.GPTDataConfig | None, settings: SourceSettings):
    """The schema flags' options; in a program with the tokenizer flags (`define_tokenizer_flags`)
    the EOD id defaults to the datasets' recorded one, and ids outside the vocabulary are refused."""
    if "allow_mixed_tokenizers" not in flags.FLAGS:
        return schema_flags.schema_options_from_flags()
    from jaxblend.cli import tokenizer_flags

    recorded = tokenizer_flags.run_tokenizer_from_flags(config, settings.access)
    options = schema_flags.schema_options_from_flags(eod_id=recorded.eod_id)
    if recorded.vocab_size is not None:
        from jaxblend.tokenizer_facts import check_ids

        check_ids(
            recorded.vocab_size, options.eod_id, options.pad_id, {},
            vocab_label="the datasets' recorded vocabulary of ",
        )
    return options


def source_from_flags(split: str):
    """The source of `split` described by the data, schema and source flags.

    Args:
      split: as for `open_source`.

    Raises:
      ValueError: if the configuration has no such split.
      TokenizerMismatchError: the datasets come from different tokenizers, or the EOD or pad id
        is outside their vocabulary (programs with the tokenizer flags).
    """
    settings = source_settings_from_flags()
    config = _config_from_flags(settings)
    return open_source(
        split, config, _schema_from_flags(config, settings), settings
    )


def validation_sources_from_flags() -> dict:
    """The validation source(s) described by the flags (see `open_validation_sources`)."""
    settings = source_settings_from_flags()
    config = _config_from_flags(settings)
    return open_validation_sources(config, _schema_from_flags(config, settings), settings)


def history_from_flags(split: str, source):
    """The resume history (`jaxblend.loading.StagedHistory`) of `source`, the `split` source the
    flags describe, when it is a `--data_schedule` train split; else None (the loader then checks
    the whole source)."""
    if split != "train" or flags.FLAGS.mock_data:
        return None
    from jaxblend.cli import schedule_flags

    if schedule_flags.flag_value() is None:
        return None
    settings = source_settings_from_flags()
    config = _config_from_flags(settings)
    return schedule_flags.staged_history(config, source, settings.access)

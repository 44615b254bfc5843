"""The run's configuration, assembled once from the flags' values.

`assemble(values)` is the one function that turns the values of the data, storage, source,
step-plan and schema flags (`jaxblend.cli.flag_values.DataFlagValues`) into what a program reads,
in this order:

  1. `DataAccess`    where and how the data and its index maps are reached;
  2. `StepSettings`  the step plan: global batch sizes, steps, evaluation batches;
  3. `DataSchedule`  `--data_schedule`'s stages (read with the access), or None;
  4. `GPTDataConfig` the data: blends, split, sequence length, seed, and the sample counts of
                     `StepSettings.sample_counts` (the same in every tool and in training, so
                     they all compute the same index-map key and publication key);
  5. `GPTSchemaOptions` the sample schema: what the arrays of a window hold (the window itself,
                     sequence length and extra token, is the data configuration's: each fact
                     is stored once, and every option that changes a batch's tokens is there).

It reads no absl flag and may be called from Python and tests with values built by hand;
`run_config_from_flags()` is the same call on the program's parsed flags, used by every tool and
by the training example.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from absl import app

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.cli import data_flags, object_store_flags, schema_flags
from jaxblend.cli.flag_values import DataFlagValues, read_flag_values
from jaxblend.cli.steps import StepSettings
from jaxblend.urls import is_url

if TYPE_CHECKING:  # the sampling and source layers load JAX/Numba: deferred
    from jaxblend.sampling import DataSchedule, PhaseStepPlan
    from jaxblend.sources import GPTSchemaOptions


@dataclasses.dataclass(frozen=True)
class MockSettings:
    """A synthetic source (`jaxblend.sources.MockSource`) instead of datasets: the data
    configuration of mock data.

    Attributes:
      num_samples: samples of the source.
      vocab_size: token ids are drawn below this.
      seed: the source's random seed.
      seq_length: tokens per sample.
      add_extra_token_to_sequence: windows hold `seq_length + 1` tokens.
    """

    num_samples: int
    vocab_size: int
    seed: int
    seq_length: int
    add_extra_token_to_sequence: bool = True

    def __post_init__(self) -> None:
        if self.num_samples < 1 or self.vocab_size < 1:
            raise ValueError(
                f"--mock_num_samples and --mock_vocab_size must be >= 1, got {self.num_samples} "
                f"and {self.vocab_size}"
            )


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What a program reads, assembled by `assemble`.

    Attributes:
      access: where and how the datasets and their index maps are reached.
      steps: the step plan's settings (global batch sizes, steps, evaluation).
      schedule: `--data_schedule`'s stages in steps, or None.
      config: the data configuration (None with mock data), validation sets included.
      schema: the sample schema.
      mock: the synthetic source replacing the datasets, or None.
      tokenizer: what the tokenizer step returned (`jaxblend.cli.RunTokenizer`), or None when
        none was asked for.
    """

    access: DataAccess
    steps: StepSettings
    schedule: DataSchedule | None
    config: index.GPTDataConfig | None
    schema: GPTSchemaOptions
    mock: MockSettings | None = None
    tokenizer: Any = None

    @property
    def seq_length(self) -> int:
        """Tokens per sample: the data configuration's (the mock data's)."""
        return (self.mock if self.config is None else self.config).seq_length


def data_access(values: DataFlagValues, default_map_location: str | None = None) -> DataAccess:
    """Where and how the flags' data is reached.

    `--s3_endpoint`, `--s3_region`, `--storage_concurrency`, `--storage_retries` and
    `--storage_timeout` give the object-store options (over the environment's endpoint and
    region); `--data_cache_path`, `--data_cache_mirror` and `--data_cache_wait` the map store; a
    bucket `--data_cache_path` also holds the shared identity memo (`<path>/identity/`);
    `--storage_backend` how `.bin` files are read.

    Args:
      default_map_location: the map store's location when `--data_cache_path` is not given.

    Raises:
      ValueError: one line naming the bad flag.
    """
    env = DataAccess.from_env()  # the environment's mirror and identity memo, under the flags
    store = object_store_flags.object_store_options(values)
    location = values.data_cache_path or default_map_location
    try:
        maps = MapStoreOptions(
            location=location,
            mirror=values.data_cache_mirror or env.maps.mirror,
            wait_seconds=values.data_cache_wait,
        )
    except ValueError as e:
        raise ValueError(f"--data_cache_path/--data_cache_mirror/--data_cache_wait: {e}") from None
    identity = env.identity
    if is_url(location):
        identity = dataclasses.replace(identity, shared_url=f"{location.rstrip('/')}/identity/")
    return DataAccess(
        object_store=store, maps=maps, identity=identity, backend=values.storage_backend
    )


def mock_settings(values: DataFlagValues) -> MockSettings | None:
    """The synthetic source of `--mock_data`, or None.

    Raises:
      ValueError: `--mock_data` beside `--data_schedule`, `--fim_data` or `--packing=best_fit`,
        or bad mock sizes.
    """
    if not values.mock_data:
        return None
    if values.packing != "concat":
        raise ValueError(
            f"--packing={values.packing} packs the documents of datasets; --mock_data has none "
            "(its samples are synthetic windows): drop one of the two"
        )
    if values.fim_data:
        raise ValueError(
            "--fim_data rewrites real documents with their tokenizer; --mock_data has neither: "
            "drop one of the two"
        )
    if values.data_schedule:
        raise ValueError(
            f"--data_schedule={values.data_schedule} blends datasets but --mock_data replaces "
            "them with synthetic samples: drop one of the two"
        )
    if values.seq_length is None:
        raise ValueError("--seq_length is required")
    return MockSettings(
        values.mock_num_samples, values.mock_vocab_size, values.seed, values.seq_length,
        values.add_extra_token_to_sequence,
    )


def read_schedule(values: DataFlagValues, access: DataAccess) -> DataSchedule | None:
    """The stages of `--data_schedule` (None without it): its JSON file (local, ``file://``,
    ``gs://`` or ``s3://``), read with `access`. The format and the rules are in
    docs/schedules.md and `jaxblend.sampling.data_schedule`.

    Raises:
      ValueError: one line naming ``--data_schedule <path>``: the file is missing or unreadable,
        or not a valid schedule (which stage, what is wrong).
    """
    if not values.data_schedule:
        return None
    from jaxblend.sampling import DataSchedule
    from jaxblend.tokenizer_facts import read_text

    source = f"--data_schedule {values.data_schedule}"
    try:
        text = read_text(values.data_schedule, access)
    except UnicodeDecodeError:
        raise ValueError(f"{source}: not a UTF-8 text file; expected a JSON schedule") from None
    except (ValueError, OSError, TimeoutError) as err:  # the store's failure, in one line
        raise ValueError(f"{source}: cannot read it ({' '.join(str(err).split())})") from None
    if text is None:
        raise ValueError(f"{source}: no such file; give the path or URL of the schedule's JSON")
    return DataSchedule.from_json_text(text, source)


# The fields of `GPTDataConfig` and `GPTSchemaOptions` that are a flag's value as it is.
_DATA_AS_GIVEN = (
    "split", "seq_length", "seed", "add_extra_token_to_sequence",
    "drop_last_partial_validation_sequence", "mid_level_dataset_surplus",
    "multiple_validation_sets", "full_validation", "packing", "packing_window", "packing_overflow",
)
_SCHEMA_AS_GIVEN = (
    "eod_mask_loss", "reset_position_ids", "reset_attention_mask", "megatron_compat", "pad_id",
    "inter_document_masking",
)


def data_config(
    values: DataFlagValues,
    steps: StepSettings,
    schedule: DataSchedule | None,
    default_blend: tuple[str, ...] | None = None,
    phase: PhaseStepPlan | None = None,
) -> index.GPTDataConfig:
    """The `GPTDataConfig` of the data flags' values.

    Args:
      steps: the step plan (the sample counts not given, and a schedule's steps in samples).
      schedule: `--data_schedule`'s stages, or None.
      default_blend: the blend used when no data path flag is given (e.g. a built-in corpus).
      phase: one of Megatron's phases: the train split then holds that phase alone.

    Raises:
      ValueError: missing --seq_length, no data path, both --data_path and per-split paths, an
        unreadable data-args file, or a schedule stage past the run's end.
    """
    if values.seq_length is None:
        raise ValueError("--seq_length is required")
    blend, per_split = data_flags.blends_from_values(
        values, default_blend, scheduled=schedule is not None
    )
    counts = steps.sample_counts(values.train_samples, values.valid_samples, values.test_samples)
    train_schedule = None
    if schedule is not None:
        train_schedule = schedule.blend_schedule(steps.covering(counts[0]))
        if blend is None and all(b is None for b in per_split):
            per_split = None  # no validation or test split
    config = index.GPTDataConfig(
        blend=blend,
        blend_per_split=None if blend is not None else per_split,
        train_schedule=train_schedule,
        num_samples=counts,
        **{name: getattr(values, name) for name in _DATA_AS_GIVEN},
    )
    if phase is not None:  # a fresh blend of Megatron's `train_samples_in_current_phase`
        config = dataclasses.replace(config, num_samples=(phase.num_samples, *counts[1:]))
    return config


def schema_options(
    values: DataFlagValues, eod_id: int | None = None, tokenizer: Any = None
) -> GPTSchemaOptions:
    """The sample schema of the schema flags' values (the window, `--seq_length` and
    `--add_extra_token_to_sequence`, is the data configuration's).

    Args:
      eod_id: the end-of-document id when `--eod_id` is not given.
      tokenizer: the `TokenizerSpec` of `--tokenizer_type` & co., which `--fim_data` uses for
        data without a preprocessing record.

    Raises:
      ValueError: an inconsistent combination (the message names the option).
    """
    from jaxblend.sources import GPTSchemaOptions

    return GPTSchemaOptions(
        eod_id=values.eod_id if values.eod_id is not None else eod_id,
        fim=schema_flags.fim_options(values, tokenizer),
        **{name: getattr(values, name) for name in _SCHEMA_AS_GIVEN},
    )


TokenizerStep = Callable[[index.GPTDataConfig | None, DataAccess], Any]

_EOD_FLAGS = ("eod_mask_loss", "reset_position_ids", "reset_attention_mask")


def check_datasets_exist(config: index.GPTDataConfig, access: DataAccess) -> None:
    """Refuses a configuration naming a dataset that does not exist, with the line opening it
    would give (and the likely prefix): called before a program asks for a fact the datasets'
    records would give, so that a wrong path is said first (`jaxblend.opening.check_datasets_exist`).

    Raises:
      IndexFormatError: a dataset does not exist.
    """
    from jaxblend import opening

    opening.check_datasets_exist(
        index.config_prefixes(config), access, opening.config_blends(config)
    )


def without_record(prefixes: list[str]) -> str:
    """Says that ``prefixes`` have no preprocessing record and where the first one's was sought:
    ``/d/x_text_document has none (looked for /d/.jaxblend/x.preprocess.json or ...)``."""
    from jaxblend.tokenizer_facts import where_records_were_sought

    note = f"{prefixes[0]} has none ({where_records_were_sought(prefixes[0])})"
    if len(prefixes) > 1:
        others = len(prefixes) - 1
        note += f", nor {'has' if others == 1 else 'have'} {others} other dataset{'s' * (others > 1)}"
    return note


def require_eod_id(
    values: DataFlagValues,
    config: index.GPTDataConfig | None,
    access: DataAccess,
    eod_id: int | None,
    recorded: Any = None,
) -> None:
    """Refuses `--eod_mask_loss`, `--reset_position_ids` or `--reset_attention_mask` without an EOD
    id (neither `--eod_id` nor a record gives one); a dataset that does not exist is said first.

    Args:
      config: the data configuration (None: mock data).
      access: how the datasets are reached.
      eod_id: the EOD id the records (or the program) give, or None.
      recorded: the tokenizer step's result (its `facts`: prefix -> recorded facts), or None when
        the program has no tokenizer step.

    Raises:
      IndexFormatError: a dataset does not exist.
      app.UsageError: one line naming the flags, where the records were sought, and how to give
        it.
    """
    needing = [f"--{name}" for name in _EOD_FLAGS if getattr(values, name)]
    if not needing or values.eod_id is not None or eod_id is not None:
        return
    what = f"--eod_id is required with {' and '.join(needing)}"
    if config is None:
        raise app.UsageError(f"{what}: mock data has no end-of-document id")
    facts = dict(getattr(recorded, "facts", None) or {})
    prefixes = index.config_prefixes(config)
    check_datasets_exist(config, access)
    if facts:
        first = next(iter(facts))
        raise app.UsageError(
            f"{what}: the tokenizer recorded with {first} ({facts[first].describe()}) has no "
            "end-of-document id; pass --eod_id"
        )
    how = "pass --eod_id" + (", or --tokenizer_type (and its files)" if recorded is not None else "")
    raise app.UsageError(
        f"{what} when the datasets have no preprocessing record: {without_record(prefixes)}; "
        f"{how}"
    )


def assemble(
    values: DataFlagValues,
    *,
    default_blend: tuple[str, ...] | None = None,
    default_map_location: str | None = None,
    default_eod_id: int | None = None,
    phase: PhaseStepPlan | None = None,
    tokenizer: TokenizerStep | None = None,
) -> RunConfig:
    """The run's configuration: access, step plan, schedule, data configuration, schema.

    Args:
      values: the flags' values (`read_flag_values`, or built in Python).
      default_blend: the blend when no data path flag is given (the training example's built-in
        corpus).
      default_map_location: the index-map cache when `--data_cache_path` is not given.
      default_eod_id: the EOD id when neither `--eod_id` nor the datasets' record gives one.
      phase: one of Megatron's phases (`--phase_transition_iterations`): the train split holds
        that phase's fresh blend.
      tokenizer: called with the data configuration and the access before the schema is built
        (e.g. `jaxblend.cli.tokenizer_flags.run_tokenizer_from_flags`, which refuses a blend of
        different tokenizers); its result's `eod_id`, when not None, is the schema's default EOD
        id, and the result is kept as `RunConfig.tokenizer`.

    Raises:
      ValueError: one line naming the bad flag or file.
      IndexFormatError: a dataset does not exist, found before a fact its record would give is
        asked for (`require_eod_id`).
      app.UsageError: inconsistent step-plan flags.
    """
    access = data_access(values, default_map_location)
    steps = StepSettings.from_values(values)
    mock = mock_settings(values)
    schedule = read_schedule(values, access)
    config = None if mock is not None else data_config(
        values, steps, schedule, default_blend, phase
    )
    recorded = None if tokenizer is None else tokenizer(config, access)
    eod_id = default_eod_id
    if recorded is not None and recorded.eod_id is not None:
        eod_id = recorded.eod_id
    require_eod_id(values, config, access, eod_id, recorded)
    return RunConfig(
        access=access,
        steps=steps,
        schedule=schedule,
        config=config,
        schema=schema_options(values, eod_id, getattr(recorded, "spec", None)),
        mock=mock,
        tokenizer=recorded,
    )


def run_config_from_flags(**options: Any) -> RunConfig:
    """`assemble(read_flag_values(), **options)`: the configuration of the parsed flags."""
    return assemble(read_flag_values(), **options)


def data_access_from_flags(default_map_location: str | None = None) -> DataAccess:
    """`data_access` of the parsed flags: where and how their data is reached."""
    return data_access(read_flag_values(), default_map_location)


def prefixes_from_flags() -> list[str]:
    """Every distinct dataset prefix the data flags name, in order (needs no --seq_length).

    Raises:
      ValueError: no data path, both forms given, a malformed blend or schedule.
    """
    values = read_flag_values()
    schedule = read_schedule(values, data_access(values))
    blend, per_split = data_flags.blends_from_values(values, scheduled=schedule is not None)
    named = index.blend_prefixes([blend] if blend is not None else per_split)
    if schedule is None:
        return named
    return list(dict.fromkeys([*schedule.prefixes(), *named]))

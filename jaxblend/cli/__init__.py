"""The command-line layer: every absl flag of jaxblend, and the config objects they describe.

Flags are grouped by what they configure; each group has a `define_*()` function, called by an
entry point (a tool's or the training example's) before absl parses the command line, which marks
each flag with its `--help` group (`flag_help.group`: data, storage, sequence and schema, ...). Importing
any jaxblend module defines no flag, and nothing outside this package reads `absl.flags.FLAGS`
(the entry-point modules excepted): the library takes plain arguments and config objects.

  flag_values        every data, storage, source, step-plan and schema flag, read once into a
                     frozen `DataFlagValues` (`read_flag_values`)
  assembly           `assemble(values)`: the one function that builds `DataAccess` -> step plan
                     -> `--data_schedule`'s file -> `GPTDataConfig` -> `GPTSchemaOptions` (a
                     `RunConfig`), without flags; `run_config_from_flags()` on the parsed flags
                     (`data_access_from_flags()`, `prefixes_from_flags()`: parts of it)
  steps              --global_batch_size, --rampup_batch_size, --step_batch_size_schedule,
                     --train_iters, --eval_interval, --eval_iters -> `StepSettings`: the step
                     plan and the rule deriving the sample counts
  data_flags         Megatron-LM data flags (definitions; the blend flags' values)
  schema_flags       sample-schema flags -> `GPTSchemaOptions`, Megatron's --fim-* flags among
                     them -> `GPTSchemaOptions.fim`
  source_flags       mock data, storage backend; opens a split's source of a `RunConfig` (and
                     a staged train split's resume history, `history_of`)
  phase_flags        --phase_transition_iterations -> `PhaseTransitions` (Megatron's phases)
  distributed_flags  --coordinator_address, ... -> `DistributedConfig`; --mesh_shape,
                     --mesh_axes -> `jax.sharding.Mesh`
  loader_flags       --worker_count, --read_ahead, --adaptive_read_ahead, ... -> `PrefetchOptions`;
                     --stall_threshold -> `TelemetryOptions`; --metrics_port, --metrics_address
  train_flags        the training example's flags -> `TrainSettings`
  tokenizer_flags    --allow_mixed_tokenizers, --tokenizer_type, ... -> `RunTokenizer` (the
                     datasets' recorded tokenizer facts: --vocab_size, --eod_id defaults)
  tool_flags         each tool's own flags; preprocess_flags: the preprocessing CLI's
  data_warnings      --warn_epochs; a training dataset shorter than one sequence or repeated
                     more epochs than that, as warning lines (training, inspect preflight)
  entry              `call(main, argv, define=...)` -> exit code (in-process):
                     defines the flags, parses, one-line failures, then leaves the process clean;
                     `runner(main, ...)`: a CLI module's `run(argv=None)`;
                     `SharedFlags`: the training job's flagfile accepted by the data tools
  flag_help          `--help`: the program's docstring and its flags by group (`group`, `ORDER`)
  megatron_argv      Megatron-LM's spellings (dashes, space-separated lists)
"""

from jaxblend.cli.assembly import (
    MockSettings,
    RunConfig,
    assemble,
    data_access_from_flags,
    prefixes_from_flags,
    run_config_from_flags,
)
from jaxblend.cli.data_flags import define_data_flags
from jaxblend.cli.distributed_flags import (
    define_distributed_flags,
    define_mesh_flags,
    distributed_config_from_flags,
    initialize_from_flags,
    mesh_from_flags,
)
from jaxblend.cli.entry import call
from jaxblend.cli.flag_values import DataFlagValues, read_flag_values
from jaxblend.cli.loader_flags import (
    define_loader_flags,
    define_telemetry_flags,
    prefetch_from_flags,
    telemetry_from_flags,
)
from jaxblend.cli.object_store_flags import object_store_from_flags
from jaxblend.cli.schema_flags import define_schema_flags
from jaxblend.cli.source_flags import (
    checked_run_config_from_flags,
    define_source_flags,
    history_of,
    open_source,
    open_validation_sources,
)
from jaxblend.cli.steps import (
    MEGATRON_NARGS,
    StepSettings,
    define_step_plan_flags,
)
from jaxblend.cli.tokenizer_flags import (
    RunTokenizer,
    decoder_from_flags,
    define_tokenizer_flags,
    run_tokenizer_from_flags,
)
from jaxblend.cli.train_flags import TrainSettings, define_train_flags, train_settings_from_flags

__all__ = [
    "MEGATRON_NARGS",
    "DataFlagValues",
    "MockSettings",
    "RunConfig",
    "RunTokenizer",
    "StepSettings",
    "TrainSettings",
    "assemble",
    "call",
    "checked_run_config_from_flags",
    "data_access_from_flags",
    "decoder_from_flags",
    "define_data_flags",
    "define_distributed_flags",
    "define_loader_flags",
    "define_mesh_flags",
    "define_schema_flags",
    "define_source_flags",
    "define_step_plan_flags",
    "define_telemetry_flags",
    "define_tokenizer_flags",
    "define_train_flags",
    "distributed_config_from_flags",
    "history_of",
    "initialize_from_flags",
    "mesh_from_flags",
    "object_store_from_flags",
    "open_source",
    "open_validation_sources",
    "prefetch_from_flags",
    "prefixes_from_flags",
    "read_flag_values",
    "run_config_from_flags",
    "run_tokenizer_from_flags",
    "telemetry_from_flags",
    "train_settings_from_flags",
]

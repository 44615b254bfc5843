"""The command-line layer: every absl flag of jaxblend, and the config objects they describe.

Flags are grouped by what they configure; each group has a `define_*()` function, called by an
entry point (a tool's or the training example's) before absl parses the command line, which marks
each flag with its `--help` group (`flag_help.group`: data, storage, sequence and schema, ...). Importing
any jaxblend module defines no flag, and nothing outside this package reads `absl.flags.FLAGS`
(the entry-point modules excepted): the library takes plain arguments and config objects.

Each module's docstring says what its flags give (`flag_values` reads them once, `assembly`
builds the run's `RunConfig`, `entry` runs a program in-process); docs/design.md, "The
command-line layer", describes the whole.
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

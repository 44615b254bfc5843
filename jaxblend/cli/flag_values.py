"""The values of the data, storage, source, step-plan and schema flags, read once.

`read_flag_values()` copies every flag of those groups out of absl's `FLAGS` into one
frozen `DataFlagValues`; from there on nothing reads absl: `jaxblend.cli.assembly.assemble` builds
the run's configuration from the values alone. A field is named after its flag; a flag the
program does not define keeps the field's default, which is the flag's own default (the step
flags' defaults are the constants below, shared with their definitions), so every program that
is given the same flags assembles the same configuration.
"""

from __future__ import annotations

import dataclasses

from absl import flags

from jaxblend import access
from jaxblend.fim_options import FIMOptions

# Defaults of the step-plan flags (`define_step_plan_flags`): one value for every program, so the
# sample counts derived from them are the same in the tools and in training.
DEFAULT_GLOBAL_BATCH_SIZE = 16
DEFAULT_TRAIN_ITERS = 300
DEFAULT_EVAL_INTERVAL = 100
DEFAULT_EVAL_ITERS = 4

_STORE = access.ObjectStoreOptions()
_FIM = FIMOptions()


def _blend(value) -> tuple[str, ...] | None:
    """A blend flag's value (an absl list, one string per item) as one token tuple."""
    if not value:
        return None
    return tuple(" ".join(value).split())


@dataclasses.dataclass(frozen=True)
class DataFlagValues:
    """Every flag that says what a run reads and how, as plain values (one field per flag).

    Blend flags hold token tuples (`("30", "/d/a", "70", "/d/b")`), already split; the other
    fields hold the flag's value as absl parsed it. `global_batch_size_given` records whether
    `--global_batch_size` was on the command line (`--step_batch_size_schedule` refuses it).
    """

    # data flags (`define_data_flags`)
    data_path: tuple[str, ...] | None = None
    train_data_path: tuple[str, ...] | None = None
    valid_data_path: tuple[str, ...] | None = None
    test_data_path: tuple[str, ...] | None = None
    data_args_path: str | None = None
    per_split_data_args_path: str | None = None
    data_schedule: str | None = None
    split: str = "969,30,1"
    seq_length: int | None = None
    seed: int = 1234
    train_samples: int | None = None
    valid_samples: int | None = None
    test_samples: int | None = None
    add_extra_token_to_sequence: bool = True
    drop_last_partial_validation_sequence: bool = True
    mid_level_dataset_surplus: float = 0.005
    packing: str = "concat"
    packing_window: int = 16384
    packing_overflow: str = "cut"
    multiple_validation_sets: bool = False
    full_validation: bool = False
    # storage and cache flags (data flags too)
    data_cache_path: str | None = None
    data_cache_mirror: str | None = None
    data_cache_wait: float = 900.0
    s3_endpoint: str | None = None
    s3_region: str | None = None
    storage_concurrency: int = _STORE.request_concurrency
    storage_retries: int = _STORE.max_retries
    storage_timeout: float = _STORE.request_timeout
    # source flags (`define_source_flags`)
    storage_backend: str = "auto"
    mock_data: bool = False
    mock_num_samples: int = 1 << 20
    mock_vocab_size: int = 32000
    # step-plan flags (`define_step_plan_flags`)
    global_batch_size: int = DEFAULT_GLOBAL_BATCH_SIZE
    global_batch_size_given: bool = False
    rampup_batch_size: str | None = None
    step_batch_size_schedule: str | None = None
    train_iters: int = DEFAULT_TRAIN_ITERS
    eval_interval: int = DEFAULT_EVAL_INTERVAL
    eval_iters: int = DEFAULT_EVAL_ITERS
    # schema flags (`define_schema_flags`)
    eod_id: int | None = None
    eod_mask_loss: bool = False
    megatron_compat: bool = False
    pad_id: int | None = None
    inter_document_masking: bool = False
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    # fill-in-the-middle flags (`define_fim_flags`, part of the schema flags)
    # (`fim_<name>` for each of `FIMOptions.setting_names()`, its default `FIMOptions`')
    fim_data: bool = False
    fim_rate: float = _FIM.rate
    fim_spm_rate: float = _FIM.spm_rate
    fim_split_sample: str | None = _FIM.split_sample
    fim_fragment_rate: float | None = _FIM.fragment_rate
    fim_no_prefix: str | None = _FIM.no_prefix
    fim_prefix_token: str = _FIM.prefix_token
    fim_middle_token: str = _FIM.middle_token
    fim_suffix_token: str = _FIM.suffix_token
    fim_pad_token: str = _FIM.pad_token
    fim_eod_token: str = _FIM.eod_token

    def replace(self, **changes) -> DataFlagValues:
        """A copy with `changes` (field name -> value)."""
        return dataclasses.replace(self, **changes)


_BLEND_FIELDS = ("data_path", "train_data_path", "valid_data_path", "test_data_path")


def read_flag_values() -> DataFlagValues:
    """The values of every flag of `DataFlagValues` that the program defines (parsed)."""
    fl = flags.FLAGS
    values = {}
    for field in dataclasses.fields(DataFlagValues):
        name = field.name
        if name in fl:
            value = fl[name].value
            values[name] = _blend(value) if name in _BLEND_FIELDS else value
    if "global_batch_size" in fl:
        values["global_batch_size_given"] = fl["global_batch_size"].present
    return DataFlagValues(**values)

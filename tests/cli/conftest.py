"""Flags of the cli tests: every group defined once in absl's global `FLAGS` of the test process
(no flag is defined on import, so the tests define them), values restored after each test."""

from __future__ import annotations

import dataclasses

import pytest
from absl import flags

from jaxblend import cli

# A flag of each group -> the group's define function.
_GROUPS = {
    "data_path": cli.define_data_flags,
    "eod_id": cli.define_schema_flags,
    "mock_data": cli.define_source_flags,
    "global_batch_size": cli.define_step_plan_flags,
    "mesh_shape": cli.define_mesh_flags,
    "coordinator_address": cli.define_distributed_flags,
    "worker_count": cli.define_loader_flags,
}


@pytest.fixture
def fl():
    """absl's global `FLAGS` with the groups defined and parsed; values restored afterwards."""
    values = flags.FLAGS
    for sentinel, define in _GROUPS.items():
        if sentinel not in values:
            define()
    if not values.is_parsed():
        values(["test"])
    saved = {name: values[name].value for name in values}
    yield values
    for name, value in saved.items():
        if values[name].value != value:
            values[name].value = value


def step_settings(global_batch_size: int | None = None) -> cli.StepSettings:
    """The `StepSettings` of the parsed flags (`global_batch_size` in place of
    `--global_batch_size`)."""
    settings = cli.StepSettings.from_values(cli.read_flag_values())
    if global_batch_size is not None:
        settings = dataclasses.replace(settings, global_batch_size=global_batch_size)
    return settings

"""`jaxblend.distributed.DistributedConfig`: validated settings of a multi-process run."""

from __future__ import annotations

import pytest

from jaxblend import distributed
from jaxblend.distributed import DistributedConfig


def test_no_settings_is_a_single_or_detected_run():
    assert not DistributedConfig().multi_process


def test_all_three_or_coordinator_and_count():
    assert DistributedConfig("h:1", 2, 0).multi_process
    assert DistributedConfig("h:1", 2).multi_process  # JAX detects the process index


@pytest.mark.parametrize(
    ("address", "count", "index", "missing"),
    [(None, 2, 0, "coordinator_address"), ("h:1", None, 0, "num_processes"),
     (None, None, 1, "coordinator_address")],
)
def test_partial_settings_name_the_missing_flags(address, count, index, missing):
    with pytest.raises(ValueError, match=f"go together; missing .*{missing}"):
        DistributedConfig(address, count, index)


def test_bad_numbers_name_the_flag():
    with pytest.raises(ValueError, match="--distributed_timeout"):
        DistributedConfig(timeout_seconds=0)
    with pytest.raises(ValueError, match="--num_cpu_devices"):
        DistributedConfig(num_cpu_devices=0)


def test_setup_forces_the_cpu_device_count_without_joining(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    joined = []
    monkeypatch.setattr(distributed, "initialize", lambda *a: joined.append(a))
    distributed.setup(DistributedConfig(num_cpu_devices=4))
    import os

    assert os.environ["XLA_FLAGS"] == (
        "--xla_dump_to=/tmp/x --xla_force_host_platform_device_count=4"
    )
    assert joined == []
    distributed.setup(DistributedConfig("h:1", 2, 1, timeout_seconds=9))
    assert joined == [("h:1", 2, 1, 9)]

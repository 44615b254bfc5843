"""Pure host-sharding math: rows per process for any mesh and process layout; the step sampler."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxblend import sampling
from jaxblend.sampling import StepSampler


@dataclasses.dataclass(frozen=True)
class FakeDevice:
    id: int
    process_index: int


class FakeSharding:
    """devices_indices_map of a real NamedSharding, with devices re-assigned to fake processes."""

    def __init__(self, sharding, devices_per_process: int):
        self.sharding = sharding
        self.per = devices_per_process

    def devices_indices_map(self, shape):
        real = self.sharding.devices_indices_map(shape)
        order = {d: i for i, d in enumerate(self.sharding.mesh.devices.flat)}
        return {FakeDevice(d.id, order[d] // self.per): idx for d, idx in real.items()}


def mesh(shape, axes):
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), axes)


class TestRowsByProcess:
    def test_single_process_owns_every_row(self):
        s = NamedSharding(mesh((8,), ("data",)), P("data"))
        rows = sampling.rows_by_process(16, s)
        assert list(rows) == [0]
        np.testing.assert_array_equal(rows[0], np.arange(16))

    @pytest.mark.parametrize("procs", [2, 4, 8])
    def test_data_axis_splits_contiguously(self, procs):
        s = FakeSharding(NamedSharding(mesh((8,), ("data",)), P("data")), 8 // procs)
        rows = sampling.rows_by_process(32, s)
        assert sorted(rows) == list(range(procs))
        np.testing.assert_array_equal(np.concatenate([rows[p] for p in range(procs)]), np.arange(32))
        assert all(r.size == 32 // procs for r in rows.values())

    def test_tensor_replicas_load_the_same_rows(self):
        # mesh (2 data, 4 tensor) over 4 processes of 2 devices: processes 0,1 hold data shard 0.
        s = FakeSharding(NamedSharding(mesh((2, 4), ("data", "tensor")), P("data")), 2)
        rows = sampling.rows_by_process(8, s)
        np.testing.assert_array_equal(rows[0], rows[1])
        np.testing.assert_array_equal(rows[2], rows[3])
        np.testing.assert_array_equal(rows[0], np.arange(4))
        np.testing.assert_array_equal(rows[2], np.arange(4, 8))

    def test_data_and_fsdp_axes(self):
        s = FakeSharding(NamedSharding(mesh((2, 2, 2), ("data", "fsdp", "tensor")), P(("data", "fsdp"))), 2)
        rows = sampling.rows_by_process(8, s)
        np.testing.assert_array_equal(np.concatenate([rows[p] for p in range(4)]), np.arange(8))

    def test_process_sample_ids(self):
        s = FakeSharding(NamedSharding(mesh((8,), ("data",)), P("data")), 4)
        plan = sampling.FixedStepPlan(global_batch_size=8, num_steps=4)
        np.testing.assert_array_equal(
            sampling.ProcessRows.of(plan, s, 1).sample_ids(3), np.arange(28, 32)
        )
        assert sampling.batch_rows_for_process(8, s, 5).size == 0
        assert sampling.ProcessRows.of(plan, s, 5).sample_ids(3).size == 0

    def test_indivisible_batch_is_a_clear_error(self):
        s = NamedSharding(mesh((8,), ("data",)), P("data"))
        with pytest.raises(ValueError, match="global_batch_size=12"):
            sampling.rows_by_process(12, s)
        with pytest.raises(ValueError, match="global_batch_size must be > 0"):
            sampling.rows_by_process(0, s)
        with pytest.raises(IndexError, match="step"):
            sampling.ProcessRows.of(sampling.FixedStepPlan(8, 4), s, 0).sample_ids(-1)
        with pytest.raises(ValueError, match="global_batch_size=12"):
            sampling.ProcessRows.of(sampling.FixedStepPlan(12, 4), s, 0)


class TestStepSampler:
    def test_records_are_steps_from_the_start(self):
        s = StepSampler(10, start_step=7)
        assert len(s) == 3
        assert [s[i].record_key for i in range(3)] == [7, 8, 9]
        with pytest.raises(IndexError):
            s[3]
        assert repr(s) == "StepSampler(num_steps=10, start_step=7)"

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="start_step"):
            StepSampler(3, 4)
        with pytest.raises(ValueError, match="num_steps"):
            StepSampler(-1)

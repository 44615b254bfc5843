"""`jaxblend.mesh.make_mesh`: the requested shape and axis names, over `jax.make_mesh`."""

from __future__ import annotations

import jax
import pytest
from jax.sharding import AxisType

from jaxblend import mesh as mesh_lib


@pytest.mark.parametrize(
    ("shape", "axes", "expected"),
    [
        ("8", "data", {"data": 8}),
        ("4,2", "data,tensor", {"data": 4, "tensor": 2}),
        ((2, 2, 2), ("data", "fsdp", "tensor"), {"data": 2, "fsdp": 2, "tensor": 2}),
        ("-1,2", "fsdp,tensor", {"fsdp": 4, "tensor": 2}),
        ("2x4", "tensor,data", {"tensor": 2, "data": 4}),
    ],
)
def test_shape_and_axis_names_are_honoured(shape, axes, expected):
    mesh = mesh_lib.make_mesh(shape, axes)
    assert dict(mesh.shape) == expected
    assert mesh.axis_names == tuple(expected)
    assert sorted(d.id for d in mesh.devices.flat) == sorted(d.id for d in jax.devices())
    # Auto axes: shardings propagate as with a hand-built Mesh (the model relies on it).
    assert mesh.axis_types == (AxisType.Auto,) * len(expected)


def test_the_device_order_is_jax_make_mesh_s():
    mesh = mesh_lib.make_mesh("4,2", "data,tensor")
    reference = jax.make_mesh((4, 2), ("data", "tensor"))
    assert [d.id for d in mesh.devices.flat] == [d.id for d in reference.devices.flat]


def test_a_subset_of_devices():
    mesh = mesh_lib.make_mesh("2,2", "data,tensor", devices=jax.devices()[:4])
    assert dict(mesh.shape) == {"data": 2, "tensor": 2}
    assert {d.id for d in mesh.devices.flat} == {d.id for d in jax.devices()[:4]}


@pytest.mark.parametrize(
    ("shape", "axes", "message"),
    [
        ("3", "data", "has 3 devices but there are 8"),
        ("3,-1", "data,tensor", "does not divide 8 devices"),
        ("4,2", "data", "same length"),
        ("4,2", "data,data", "distinct"),
        ("a,2", "data,tensor", "--mesh_shape must be comma-separated integers"),
    ],
)
def test_bad_meshes_are_one_line(shape, axes, message):
    with pytest.raises(ValueError, match=message):
        mesh_lib.make_mesh(shape, axes)


def test_batch_axes():
    assert mesh_lib.default_batch_axes(("data", "fsdp", "tensor")) == ("data", "fsdp")

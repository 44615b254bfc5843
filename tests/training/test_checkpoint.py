"""Orbax checkpoints of the training example: local and gs:// (fake-gcs-server), another mesh,
half-written steps, old npz directories."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxblend.training.checkpoint import Checkpointer, checkpoint_path


class _Loader:
    def __init__(self, step: int) -> None:
        self.step = step

    def state(self) -> dict:
        return {"version": 1, "step": self.step, "fingerprint": "f" * 32}


def _state(mesh, spec):
    sharding = NamedSharding(mesh, spec)
    w = jax.device_put(jnp.arange(64.0).reshape(8, 8), sharding)
    return {"w": w, "count": jax.device_put(jnp.int32(7), NamedSharding(mesh, P()))}


@pytest.fixture(params=["local", "gs"])
def directory(request, tmp_path):
    if request.param == "local":
        yield str(tmp_path / "ckpt")
        return
    server = request.getfixturevalue("gcs_server")
    with server.pointed_at():
        yield server.prefix_url(f"ckpt/{request.node.originalname}")


def test_roundtrip_onto_another_mesh(directory):
    devices = np.array(jax.devices())
    saved = _state(jax.sharding.Mesh(devices, ("data",)), P("data", None))
    ckpt = Checkpointer(directory)
    ckpt.save(3, saved, _Loader(3), {"samples_per_dataset": [1, 2]})
    ckpt.close()

    other = jax.sharding.Mesh(devices.reshape(2, 4), ("a", "b"))
    like = _state(other, P("b", "a"))
    like = jax.tree.map(jnp.zeros_like, like)
    again = Checkpointer(directory)
    assert again.latest_step() == 3
    loader, meta = again.resume_point(3)
    state = again.restore_state(3, like)
    assert loader == _Loader(3).state() and meta == {"samples_per_dataset": [1, 2]}
    np.testing.assert_array_equal(np.asarray(state["w"]), np.arange(64.0).reshape(8, 8))
    assert state["w"].sharding == like["w"].sharding
    assert int(state["count"]) == 7


def test_restore_into_another_model_names_the_checkpoint(tmp_path):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    ckpt = Checkpointer(str(tmp_path / "c"), asynchronous=False)
    ckpt.save(1, _state(mesh, P()), _Loader(1), {})
    wrong = {"w": jnp.zeros((4, 4)), "count": jnp.int32(0)}
    with pytest.raises(ValueError, match=r"step 1 cannot be restored into this model"):
        ckpt.restore_state(1, wrong)


def test_half_written_step_is_never_listed_on_gcs(gcs_server):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    with gcs_server.pointed_at():
        url = gcs_server.prefix_url("ckpt/half-written")
        ckpt = Checkpointer(url, asynchronous=False)
        ckpt.save(1, _state(mesh, P()), _Loader(1), {})
        # Step 2: every object of a complete step except the commit marker Orbax writes last,
        # i.e. what a host killed during the save leaves behind.
        kv = gcs_server.kvstore()
        prefix = "ckpt/half-written/"
        keys = [k.decode() for k in kv.list().result() if k.decode().startswith(prefix + "1/")]
        assert any(k.endswith("commit_success.txt") for k in keys), keys
        for key in keys:
            if not key.endswith("commit_success.txt"):
                new = prefix + "2/" + key[len(prefix + "1/"):]
                kv.write(new, kv.read(key).result().value).result()
        assert Checkpointer(url).latest_step() == 1


def test_half_written_step_is_never_listed_locally(tmp_path):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    ckpt = Checkpointer(str(tmp_path), asynchronous=False)
    ckpt.save(1, _state(mesh, P()), _Loader(1), {})
    # An interrupted local save is a temporary directory that was never renamed.
    shutil.copytree(tmp_path / "1", tmp_path / "2.orbax-checkpoint-tmp-1234")
    assert Checkpointer(str(tmp_path)).latest_step() == 1


def test_npz_checkpoint_directory_is_refused(tmp_path):
    old = tmp_path / "step_00000040"
    old.mkdir()
    (old / "meta.json").write_text(json.dumps({"step": 40}))
    with pytest.raises(ValueError, match=r"npz checkpoints of jaxblend 0.1 \(step_00000040\)"):
        Checkpointer(str(tmp_path))
    with pytest.raises(ValueError, match=r"npz checkpoints of jaxblend 0.1"):
        Checkpointer(f"file://{tmp_path}")  # a file:// URL is the same local directory


def test_checkpoint_path_of_urls_and_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert str(checkpoint_path("runs/a")) == str(tmp_path / "runs" / "a")
    assert str(checkpoint_path(f"file://{tmp_path}/b")) == str(tmp_path / "b")
    assert str(checkpoint_path("gs://bucket/run")) == "gs://bucket/run"


def test_orbax_save_wait_warning_hidden_unless_asked(tmp_path, caplog):
    from absl import logging as absl_logging

    def orbax_and_another_warning():
        caplog.clear()
        with caplog.at_level("WARNING"):
            absl_logging.warning("Waiting for previous save to complete took %f seconds.", 1.5)
            absl_logging.warning("another warning")
        return caplog.text

    logger = absl_logging.get_absl_logger()
    earlier = list(logger.filters)  # an in-process run stopped by an error may have left one
    logger.filters[:] = [f for f in earlier if type(f).__name__ != "_SaveWaitFilter"]
    try:
        _save_waits_follow_the_checkpointer(tmp_path, orbax_and_another_warning)
    finally:
        logger.filters[:] = earlier


def _save_waits_follow_the_checkpointer(tmp_path, orbax_and_another_warning):
    shown = Checkpointer(str(tmp_path / "shown"))
    assert "Waiting for previous save" in orbax_and_another_warning()
    shown.close()
    hidden = Checkpointer(str(tmp_path / "hidden"), show_save_waits=False)
    text = orbax_and_another_warning()
    assert "Waiting for previous save" not in text and "another warning" in text
    hidden.close()  # the filter goes with the checkpointer (an in-process run leaves none)
    assert "Waiting for previous save" in orbax_and_another_warning()


def test_resume_point_reads_no_array(tmp_path):
    """The loader state and metadata come without the arrays: with the `state` item gone they are
    still read, and only the arrays' restore fails."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    ckpt = Checkpointer(str(tmp_path), asynchronous=False)
    saved = _state(mesh, P())
    ckpt.save(2, saved, _Loader(2), {"model": {"d_model": 8}})
    shutil.rmtree(tmp_path / "2" / "state")
    assert ckpt.resume_point(2) == (_Loader(2).state(), {"model": {"d_model": 8}})
    with pytest.raises(ValueError, match=r"step 2 cannot be restored into this model"):
        ckpt.restore_state(2, saved)

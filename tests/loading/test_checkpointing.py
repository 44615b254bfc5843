"""The loader state as an item of a user's own Orbax checkpoint (`jaxblend.loading.checkpointing`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from jaxblend.loading import make_loader
from jaxblend.loading.checkpointing import FILENAME, LoaderStateRestore, LoaderStateSave
from jaxblend.sources import schema
from jaxblend.sources.mock import MockSource


def _source(seed: int = 0) -> MockSource:
    return MockSource(256, schema.GPTSchemaOptions(), seq_length=16, vocab_size=128, seed=seed)


def test_user_checkpoint_manager_resumes_the_stream(tmp_path):
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    loader = make_loader(_source(), mesh, global_batch_size=8)
    for _ in range(3):
        next(loader)
    params = {"w": jnp.ones((4, 4))}
    with ocp.CheckpointManager(tmp_path / "run") as manager:
        manager.save(3, args=ocp.args.Composite(
            params=ocp.args.StandardSave(params), loader=LoaderStateSave.of(loader)))
    expected = np.asarray(next(loader)["inputs"])

    with ocp.CheckpointManager(tmp_path / "run") as manager:
        restored = manager.restore(3, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(params), loader=LoaderStateRestore()))
    assert (tmp_path / "run" / "3" / "loader" / FILENAME).exists()
    assert restored["loader"]["step"] == 3
    resumed = make_loader(_source(), mesh, global_batch_size=8, state=restored["loader"])
    np.testing.assert_array_equal(np.asarray(next(resumed)["inputs"]), expected)

    # The saved fingerprint guards the stream: another source refuses the state.
    with pytest.raises(ValueError, match="fingerprint"):
        make_loader(_source(seed=1), mesh, global_batch_size=8, state=restored["loader"])


def test_a_json_item_that_is_not_a_loader_state_is_refused(tmp_path):
    with ocp.CheckpointManager(tmp_path) as manager:
        manager.save(1, args=ocp.args.Composite(loader=ocp.args.JsonSave({"step": 1})))
    # Written by JsonSave under another file name: the loader handler does not find its file.
    (tmp_path / "1" / "loader" / FILENAME).write_text('{"step": 1}')
    with ocp.CheckpointManager(tmp_path) as manager, pytest.raises(ValueError, match="not a loader state"):
        manager.restore(1, args=ocp.args.Composite(loader=LoaderStateRestore()))

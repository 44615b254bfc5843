"""The training example's evaluation: a validation set's first evaluation compiles its step for
its first batch and then waits for every process before it runs a batch (no process enters the
step's collectives while a peer still compiles it); later evaluations neither compile nor wait."""

from __future__ import annotations

import types

import jax
import numpy as np
import optax
from jax.sharding import Mesh

from jaxblend import cli, train
from jaxblend.mesh import default_batch_axes
from jaxblend.sources import GPTSchemaOptions, MockSource
from jaxblend.training import model


def test_a_sets_first_evaluation_compiles_then_waits_for_the_peers(capsys):
    cfg = model.ModelConfig(vocab_size=64, d_model=16, num_layers=1, num_heads=2, mlp_dim=32)
    mesh = Mesh(np.array(jax.devices()[:4]), ("data",))
    params = jax.jit(model.init_params, static_argnums=0)(cfg, 0)
    _, eval_step = train._compile_steps(train._Model(cfg, optax.adam(1e-2), params, None), 1, mesh)
    events = []

    class RecordedStep:  # the eval step, saying when it is compiled and when a batch runs
        def lower(self, *args):
            events.append("compile")
            return eval_step.lower(*args)

        def __call__(self, *args):
            events.append("batch")
            return eval_step(*args)

    sets = {name: MockSource(32, GPTSchemaOptions(), seq_length=8, vocab_size=64, seed=seed)
            for seed, name in enumerate(("valid_0", "valid_1"))}
    data = train._Data(
        train=sets["valid_0"], plan=None, valid=sets, names=["mock"], seq_length=8,
        steps=cli.StepSettings(global_batch_size=8, eval_interval=1, eval_iters=2),
    )
    for done in (1, 2):
        train._evaluate(
            done, params, RecordedStep(), data, mesh, default_batch_axes(mesh.axis_names),
            types.SimpleNamespace(log_datasets=8), None,
            lambda name: events.append(f"wait for the peers: {name}"),
        )
    first = ["compile", "wait for the peers: evaluation valid_0", "batch", "batch",
             "compile", "wait for the peers: evaluation valid_1", "batch", "batch"]
    assert events == [*first, *["batch"] * 4]
    assert capsys.readouterr().out.count(" loss ") == 4  # each set, at each evaluation

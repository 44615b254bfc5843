"""`StepLoader.start_reading`: the first steps are read in the background before the first
`next()` (a resumed run's reads overlap its checkpoint's restore), and the batches are the same."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.loading.host_source import HostStepSource
from jaxblend.sources import MockSource
from jaxblend.sources.schema import GPTSchemaOptions

B = 16


@pytest.fixture(scope="module")
def source():
    opts = GPTSchemaOptions(eod_id=99)
    return MockSource(B * 6, opts, seq_length=32, vocab_size=100, seed=3, mean_doc_length=9)


@pytest.fixture(scope="module")
def mesh():
    return Mesh(np.array(jax.devices()), ("data",))


def _host(batches):
    return [{k: np.asarray(v) for k, v in b.items()} for b in batches]


def test_reads_begin_before_the_first_next(source, mesh, monkeypatch):
    state = {**make_loader(source, mesh, global_batch_size=B).state(), "step": 2}
    read, first = HostStepSource._read, threading.Event()
    steps: list[int] = []

    def recording_read(host_source, step):
        steps.append(step)
        first.set()
        return read(host_source, step)

    monkeypatch.setattr(HostStepSource, "_read", recording_read)
    loader = make_loader(source, mesh, global_batch_size=B, state=state)
    assert not first.wait(0.5) and steps == []  # without it, nothing is read before next()
    loader.start_reading()
    loader.start_reading()  # idempotent
    assert first.wait(60), "no read began after start_reading"
    assert steps[0] == 2
    monkeypatch.undo()
    expected = _host(make_loader(source, mesh, global_batch_size=B, state=state))
    got = _host(loader)
    assert len(got) == len(expected) == 4
    for x, y in zip(got, expected, strict=True):
        for key in y:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def test_start_reading_with_worker_processes(source, mesh):
    options = PrefetchOptions(worker_count=1)
    loader = make_loader(source, mesh, global_batch_size=B, num_steps=3, prefetch=options)
    loader.start_reading()
    got = _host(loader)
    expected = _host(make_loader(source, mesh, global_batch_size=B, num_steps=3))
    assert len(got) == 3
    for x, y in zip(got, expected, strict=True):
        for key in y:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)

"""Adaptive read-ahead: the window admits steps in order, grows while the loader waits, shrinks
while it does not, stays within its memory bound; the loader's batches are the same with it."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset
from jax.sharding import Mesh

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.loading.read_window import ReadWindow
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

B, SEQ = 16, 16


def test_a_step_beyond_the_window_waits_until_the_loader_takes_one():
    window = ReadWindow(start=10, size=2, low=1, high=8, memory=1 << 20)
    window.admit(10)
    window.admit(11)
    admitted = threading.Event()

    def read_step_12():
        window.admit(12)
        admitted.set()

    thread = threading.Thread(target=read_step_12)
    thread.start()
    thread.join(0.3)
    assert thread.is_alive() and not admitted.is_set()  # 12 >= 10 + 2: not admitted
    assert window.ahead == 2
    window.taken(10, waited=0.0, step_bytes=100)
    thread.join(10)
    assert admitted.is_set() and window.ahead == 2  # 11 and 12


def test_grows_while_the_loader_waits_up_to_the_memory_bound():
    window = ReadWindow(start=0, size=2, low=1, high=64, memory=10_000)
    sizes = []
    for step in range(20):
        window.admit(step)
        window.taken(step, waited=0.05, step_bytes=1_000)
        sizes.append(window.size)
    assert window.bound == 10  # 10,000 bytes / 1,000 per step
    assert sizes[:4] == [3, 4, 5, 6] and max(sizes) == sizes[-1] == 10
    assert sizes == sorted(sizes)


def test_shrinks_while_the_loader_does_not_wait():
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30)
    for step in range(200):
        window.taken(step, waited=0.0, step_bytes=1_000)
    assert window.size == 1
    window.taken(200, waited=0.5, step_bytes=1_000)  # a wait: grows again
    assert window.size == 2


def test_grows_no_further_than_the_requests_that_fit_in_flight():
    # 256 requests in flight at once, 40 per step: 7 steps fit (+1); never below the initial 8
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, concurrency=256)
    for step in range(30):
        window.taken(step, waited=0.05, step_bytes=1_000, requests=40)
    assert window.size == 8
    # 4 requests per step: 65 steps would fit, the window grows to its 64
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, concurrency=256)
    for step in range(30):
        window.taken(step, waited=0.05, step_bytes=1_000, requests=4)
    assert window.size == 64


def test_bound_is_at_least_one_step():
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=10)
    window.taken(0, waited=1.0, step_bytes=1_000)
    assert window.bound == window.size == 1


def test_close_lets_blocked_reads_go():
    window = ReadWindow(start=0, size=1, low=1, high=4, memory=1 << 20)
    thread = threading.Thread(target=window.admit, args=(3,))
    thread.start()
    window.close()
    thread.join(10)
    assert not thread.is_alive()


def test_options():
    remote, local = True, False
    assert not PrefetchOptions().adapts(remote) and not PrefetchOptions().adapts(local)
    assert PrefetchOptions(adaptive_read_ahead=True).adapts(local)
    assert PrefetchOptions(adaptive_read_ahead=True).adapts(remote)
    assert not PrefetchOptions(worker_count=1, adaptive_read_ahead=True).adapts(remote)
    assert PrefetchOptions(adaptive_read_ahead=True).grain_read_options(remote).num_threads == 64
    assert PrefetchOptions().grain_read_options(remote).num_threads == 8
    with pytest.raises(ValueError, match="adaptive_read_ahead"):
        PrefetchOptions(adaptive_read_ahead="yes")
    with pytest.raises(ValueError, match="read_ahead_memory"):
        PrefetchOptions(read_ahead_memory=0)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("window")
    rng = np.random.default_rng(2)
    prefix = write_random_dataset(str(root / "a"), rng, 400, lengths=(2, 60), vocab=(1, 900))
    config = index.GPTDataConfig(blend=[prefix], split="100,0,0", seq_length=SEQ, seed=1,
                                 num_samples=(B * 40, None, None))
    access = DataAccess.from_env().with_maps(location=str(root / "cache"))
    return open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]


def test_loader_batches_are_the_same_and_read_ahead_stays_in_its_bound(source):
    mesh = Mesh(np.array(jax.devices()), ("data",))
    fixed = [np.asarray(b["inputs"]) for b in make_loader(
        source, mesh, global_batch_size=B, num_steps=40,
        prefetch=PrefetchOptions(adaptive_read_ahead=False))]
    step_bytes = sum(v.nbytes for v in source.read_batch(np.arange(B)).values())  # a record
    loader = make_loader(source, mesh, global_batch_size=B, num_steps=40, prefetch=PrefetchOptions(
        adaptive_read_ahead=True, read_ahead=4, read_ahead_memory=3 * step_bytes))
    adaptive, ahead = [], []
    for batch in loader:
        adaptive.append(np.asarray(batch["inputs"]))
        m = loader.metrics()
        ahead.append(m.read_ahead_steps)
        assert m.read_ahead_window is not None
    for got, want in zip(adaptive, fixed, strict=True):
        np.testing.assert_array_equal(got, want)
    m = loader.metrics()
    assert m.step_bytes == step_bytes
    bound = 3
    assert 1 <= m.read_ahead_window <= bound
    # the first window (4 steps) is admitted before a step's size is known; then the bound holds
    assert all(a <= bound for a in ahead[4:]), (ahead, bound, m.step_bytes)

"""Adaptive read-ahead: the window admits steps in order, grows while the loader waits, shrinks
while it does not, stays within its memory bound; the loader's batches are the same with it."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset
from jax.sharding import Mesh

from jaxblend import index
from jaxblend.access import DataAccess
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.loading.read_window import RETRY_STEPS, ReadWindow
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

B, SEQ = 16, 16


def test_the_window_admits_the_steps_before_its_limit_and_tells_its_watchers():
    window = ReadWindow(start=10, size=2, low=1, high=8, memory=1 << 20)
    told: list[tuple[int, int]] = []
    window.watch(lambda limit, size: told.append((limit, size)))
    assert window.limit == 12 and told == [(12, 2)]  # 10 and 11
    window.begun(10)
    window.begun(11)
    assert window.ahead == 2
    window.taken(10, waited=0.0, step_bytes=100)
    assert window.limit == 13 and told == [(12, 2), (13, 2)]  # a step taken admits one more
    window.begun(12)
    assert window.ahead == 2  # 11 and 12


class Clock:
    """A clock the test moves: the time between the steps the loader takes."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(window: ReadWindow, clock: Clock, steps, wait, period=0.01, step_bytes=1_000,
        read=None, requests=0):
    """The loader takes `steps`, `period` seconds apart, each after waiting `wait(window.size)`
    seconds (reads took `read` seconds); returns the window's size after each step."""
    sizes = []
    for step in steps:
        waited = wait(window.size)
        clock.now += period + waited
        if read is not None:
            window.read(read)
        window.taken(step, waited=waited, step_bytes=step_bytes, requests=requests)
        sizes.append(window.size)
    return sizes


def test_grows_fast_while_the_loader_waits_and_keeps_a_window_that_helps():
    clock = Clock()
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, clock=clock)
    # a step takes 200 ms to read, the loader takes one every 10 ms: it waits with fewer than 16
    # steps ahead (and the window stays above the steps its reads span)
    sizes = run(window, clock, range(100), lambda size: 0.008 if size < 16 else 0.0, read=0.2)
    assert sizes[:8] == [8] * 8  # the first window: the pipe filling, no change
    assert sizes[8] == 16  # the first wait after it doubles the window
    assert window.ceiling == 64 and sizes[8:] == [16] * 92  # kept: the waits stopped


def test_waits_the_window_cannot_help_do_not_grow_it():
    clock = Clock()
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, clock=clock)
    # a step reads in 20 ms, the loader takes one every 18 ms: 8 steps are far ahead of the
    # reads, so its waits come from elsewhere (the CPU)
    sizes = run(window, clock, range(60), lambda size: 0.008, read=0.02)
    assert max(sizes) == 8
    # one late step among many calm ones is not a reason to grow either
    window = ReadWindow(start=0, size=8, low=8, high=64, memory=1 << 30, clock=clock)
    sizes = run(window, clock, range(60), lambda size: 0.0, period=0.1)
    sizes += run(window, clock, [60], lambda size: 0.02, period=0.1, read=1.0)  # late, alone
    assert max(sizes) == 8


def test_keeps_growing_while_each_growth_helps():
    clock = Clock()
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, clock=clock)
    sizes = run(window, clock, range(200), lambda size: 0.064 / size if size < 64 else 0.0,
                read=0.5)  # each doubling halves the wait
    assert [s for k, s in enumerate(sizes) if k == 0 or s != sizes[k - 1]][:4] == [8, 16, 32, 64]
    assert max(sizes) == 64  # `high`


def test_a_growth_that_does_not_help_is_undone_and_not_tried_again_soon():
    clock = Clock()
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, clock=clock)
    # the store's request rate binds: the loader waits the same with any window
    sizes = run(window, clock, range(8 + 8 + 16 + 100), lambda size: 0.008)
    assert sizes[8] == 16 and max(sizes) == 16
    assert sizes[8 + 8 + 16:] == [8] * 100  # back to 8 after the trial, which is the ceiling
    assert window.ceiling == 8
    steps = range(8 + 8 + 16 + 100, 8 + 8 + 16 + RETRY_STEPS + 20)
    assert max(run(window, clock, steps, lambda size: 0.008)) == 16  # tried again later


def test_shrinks_slowly_to_the_steps_a_read_spans_when_the_loader_does_not_wait():
    clock = Clock()
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, clock=clock)
    # a slow consumer: 250 ms a step, a step read in 100 ms: 2 x 0.4 + 1 -> 2 steps
    sizes = run(window, clock, range(100), lambda size: 0.0, period=0.25, read=0.1)
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[8:15] == [8] * 7 and sizes[15] == 7  # one step less per window of calm steps
    assert window.floor == 2 and sizes[-1] == 2
    # reads slower than the consumer's pace: the window holds the steps they span
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, clock=clock)
    run(window, clock, range(200), lambda size: 0.0, period=0.1, read=0.3)
    assert window.floor == window.size == 7  # ceil(2 x 3) + 1
    # no read time known (local reads in other tests): down to `low`
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, clock=clock)
    assert run(window, clock, range(200), lambda size: 0.0)[-1] == 1


def test_never_above_the_memory_bound_or_max_read_ahead():
    clock = Clock()
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=12_000, clock=clock)
    sizes = run(window, clock, range(100), lambda size: 0.008)
    assert window.bound == 12 and max(sizes) == 12  # 12,000 bytes / 1,000 per step
    # the bound follows the largest step record taken
    sizes = run(window, clock, range(100, 110), lambda size: 0.008, step_bytes=4_000)
    assert window.bound == 3 and sizes == [3] * 10
    window = ReadWindow(start=0, size=8, low=1, high=10, memory=1 << 30, clock=clock)
    assert max(run(window, clock, range(100), lambda size: 0.008)) == 10


def test_grows_no_further_than_the_requests_that_fit_in_flight():
    clock = Clock()
    # 256 requests in flight at once, 40 per step: 7 steps fit (+1); never below the initial 8
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, concurrency=256,
                        clock=clock)
    assert max(run(window, clock, range(60), lambda size: 0.008, requests=40)) == 8
    # 10 requests per step: 26 steps fit
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=1 << 30, concurrency=256,
                        clock=clock)
    sizes = run(window, clock, range(100), lambda size: 0.008 * max(0, 26 - size) / 18,
                requests=10, read=0.5)
    assert max(sizes) == 26


def test_bound_is_at_least_one_step():
    window = ReadWindow(start=0, size=8, low=1, high=64, memory=10)
    window.taken(0, waited=1.0, step_bytes=1_000)
    assert window.bound == window.size == 1


def test_options():
    remote, local = True, False
    assert PrefetchOptions().adapts(remote) and not PrefetchOptions().adapts(local)  # default
    assert PrefetchOptions(adaptive_read_ahead=True).adapts(local)
    assert PrefetchOptions(adaptive_read_ahead=True).adapts(remote)
    assert not PrefetchOptions(adaptive_read_ahead=False).adapts(remote)
    assert not PrefetchOptions(worker_count=1).adapts(remote)
    assert not PrefetchOptions(worker_count=1, adaptive_read_ahead=True).adapts(remote)
    # Grain's pool serves worker processes only (reads in threads run in a ReadPool)
    assert PrefetchOptions(adaptive_read_ahead=False).grain_read_options(remote).num_threads == 8
    assert PrefetchOptions(read_ahead=5).grain_read_options(remote).num_threads == 5
    assert PrefetchOptions().grain_read_options(local).num_threads == 1
    assert PrefetchOptions(worker_count=1).read_window(local, 0) is None
    fixed = PrefetchOptions().read_window(local, 0)  # the fixed read-ahead: a constant window
    assert (fixed.low, fixed.size, fixed.high) == (1, 1, 1)
    fixed = PrefetchOptions(adaptive_read_ahead=False).read_window(remote, 0)
    assert (fixed.low, fixed.size, fixed.high) == (8, 8, 8)
    assert PrefetchOptions().read_window(remote, 0).size == 8  # from the fixed default
    with pytest.raises(ValueError, match="adaptive_read_ahead"):
        PrefetchOptions(adaptive_read_ahead="yes")
    with pytest.raises(ValueError, match="read_ahead_memory"):
        PrefetchOptions(read_ahead_memory=0)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    root = tmp_path_factory.mktemp("window")
    rng = np.random.default_rng(2)
    return write_random_dataset(str(root / "a"), rng, 400, lengths=(2, 60), vocab=(1, 900))


@pytest.fixture(scope="module")
def source(prefix, tmp_path_factory):
    root = tmp_path_factory.mktemp("window_maps")
    config = index.GPTDataConfig(blend=[prefix], split="100,0,0", seq_length=SEQ, seed=1,
                                 num_samples=(B * 40, None, None))
    access = DataAccess.from_env().with_maps(location=str(root / "cache"))
    return open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]


def test_loader_batches_are_the_same_and_read_ahead_stays_in_its_bound(source):
    others = _readers()  # those of loaders other tests left open
    mesh = Mesh(np.array(jax.devices()), ("data",))
    fixed = [np.asarray(b["inputs"]) for b in make_loader(
        source, mesh, global_batch_size=B, num_steps=40,
        prefetch=PrefetchOptions(adaptive_read_ahead=False))]
    step_bytes = sum(v.nbytes for v in source.read_batch(np.arange(B)).values())  # a record
    loader = make_loader(source, mesh, global_batch_size=B, num_steps=40, prefetch=PrefetchOptions(
        adaptive_read_ahead=True, read_ahead=4, read_ahead_memory=3 * step_bytes))
    adaptive, ahead, readers, windows = [], [], [], []
    for batch in loader:
        adaptive.append(np.asarray(batch["inputs"]))
        m = loader.metrics()
        ahead.append(m.read_ahead_steps)
        windows.append(m.read_ahead_window)
        readers.append(len(_readers() - others))
        assert m.read_ahead_window is not None
    for got, want in zip(adaptive, fixed, strict=True):
        np.testing.assert_array_equal(got, want)
    m = loader.metrics()
    assert m.step_bytes == step_bytes
    bound = 3
    assert 1 <= m.read_ahead_window <= bound
    # the first window (4 steps) is admitted before a step's size is known; then the bound holds
    assert all(a <= bound for a in ahead[4:]), (ahead, bound, m.step_bytes)
    # no more reader threads than the window held steps (a reader above a window that just
    # shrank finishes its read first), and none once the stream ended
    assert max(readers) <= 4 and all(r <= bound for r in readers[10:]), (readers, windows)
    for _ in range(1000):
        if not _readers() - others:
            break
        time.sleep(0.01)
    assert not _readers() - others


def _readers() -> set[threading.Thread]:
    """Live reader threads of adaptive loaders (`ReadPool`'s)."""
    return {thread for thread in threading.enumerate() if thread.name == "jaxblend-read"}


def test_default_on_for_a_bucket_source_off_for_local_and_the_same_bytes(
    gcs_server, prefix, source, tmp_path
):
    mesh = Mesh(np.array(jax.devices()), ("data",))
    local = make_loader(source, mesh, global_batch_size=B, num_steps=8)
    want = [np.asarray(b["inputs"]) for b in local]
    assert local.metrics().read_ahead_window is None  # local files: the fixed read-ahead
    url = gcs_server.upload(prefix, f"window/{tmp_path.name}/a")
    config = index.GPTDataConfig(blend=[url], split="100,0,0", seq_length=SEQ, seed=1,
                                 num_samples=(B * 40, None, None))
    access = DataAccess.from_env().with_maps(location=str(tmp_path / "cache"))
    with gcs_server.pointed_at():
        bucket = open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]
        assert bucket.reads_remote
        loader = make_loader(bucket, mesh, global_batch_size=B, num_steps=8)
        got = [np.asarray(b["inputs"]) for b in loader]
        assert loader.metrics().read_ahead_window is not None  # a bucket: the window adapts
        loader.close()
        fixed = make_loader(bucket, mesh, global_batch_size=B, num_steps=8,
                            prefetch=PrefetchOptions(adaptive_read_ahead=False))
        fixed_got = [np.asarray(b["inputs"]) for b in fixed]
        assert fixed.metrics().read_ahead_window is None
    for a, b, c in zip(got, fixed_got, want, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)

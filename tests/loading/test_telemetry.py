"""Loader telemetry: `metrics()` against counted reads (local files, both bucket servers through a
counting proxy), retries, Grain workers, stall reports naming a held object, the Prometheus
endpoint scraped over loopback."""

from __future__ import annotations

import itertools
import logging
import os
import urllib.request

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_fault_proxy import FaultProxy
from jax.sharding import Mesh

from jaxblend import index
from jaxblend.access import DataAccess, ObjectStoreOptions
from jaxblend.loading import (
    LoaderMetrics,
    PrefetchOptions,
    StoreMetrics,
    TelemetryOptions,
    make_loader,
    serve_metrics,
)
from jaxblend.loading.stall import StallWatch
from jaxblend.loading.telemetry import LATENCY_BOUNDS
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources
from jaxblend.storage.read_tally import PendingReads

B, SEQ, STEPS = 16, 16, 4
_names = itertools.count()


def mesh():
    return Mesh(np.array(jax.devices()), ("data",))


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("telemetry")
    rng = np.random.default_rng(5)
    return [
        write_random_dataset(str(root / name), rng, 120, lengths=(2, 60), vocab=(1, 900))
        for name in ("a", "b")
    ]


def _source(blend, cache, access=None):
    config = index.GPTDataConfig(
        blend=blend, split="100,0,0", seq_length=SEQ, seed=1, num_samples=(B * STEPS, None, None)
    )
    access = (access or DataAccess.from_env()).with_maps(location=str(cache))
    return open_gpt_sources(config, GPTSchemaOptions(), access=access)["train"]


def _weighted(paths):
    return [x for p in paths for x in ("1", p)]


# ------------------------------------------------------------------------------------ local files


def test_local_reads_are_counted_exactly(prefixes, tmp_path):
    source = _source(_weighted(prefixes), tmp_path / "cache")
    loader = make_loader(source, mesh(), global_batch_size=B, num_steps=STEPS)
    first = loader.metrics()
    next(loader)
    one = loader.metrics().since(first)
    batches = [next(loader) for _ in range(STEPS - 1)]
    m = loader.metrics()
    window = (SEQ + 1) * 2  # a row's token window, uint16
    assert (m.steps, m.tokens) == (STEPS, STEPS * B * SEQ)
    assert set(m.stores) == {"local"}
    local = m.stores["local"]
    # every step is read by the end (read-ahead), each row one window of SEQ + 1 tokens
    assert local.bytes == STEPS * B * window and local.requests == 0
    assert local.latency_p50 is None
    ids = np.concatenate([np.asarray(b["dataset_ids"]) for b in batches])
    assert set(m.dataset_bytes) == set(prefixes)
    assert sum(m.dataset_bytes.values()) == local.bytes
    assert m.dataset_bytes[prefixes[1]] >= int((ids == 1).sum()) * window
    assert one.steps == 1 and one.tokens == B * SEQ
    assert m.wait_seconds >= one.wait_seconds > 0 and m.assemble_seconds > 0
    assert m.read_seconds > 0 and m.read_ahead_steps is not None
    assert m.elapsed_seconds > 0 and m.tokens_per_second > 0
    assert m.record()["stores"]["local"]["bytes"] == local.bytes
    assert m.stalls == 0
    loader.close()


def test_reads_in_grain_workers_are_counted_too(prefixes, tmp_path):
    source = _source(_weighted(prefixes), tmp_path / "cache")
    with make_loader(source, mesh(), global_batch_size=B, num_steps=STEPS,
                     prefetch=PrefetchOptions(worker_count=1)) as loader:
        for _ in loader:
            pass
        m = loader.metrics()
    assert m.stores["local"].bytes == STEPS * B * (SEQ + 1) * 2
    assert m.read_ahead_steps is None  # the workers' reads are not visible here
    assert m.steps == STEPS


def test_counting_off_keeps_the_clocks_only(prefixes, tmp_path):
    source = _source(_weighted(prefixes), tmp_path / "cache")
    loader = make_loader(source, mesh(), global_batch_size=B, num_steps=STEPS,
                         telemetry=TelemetryOptions(collect=False, stall_threshold=0))
    list(loader)
    m = loader.metrics()
    assert m.steps == STEPS and m.stores == {} and m.dataset_bytes == {} and m.read_seconds == 0


def test_prometheus_endpoint_scraped_over_loopback(prefixes, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    source = _source(_weighted(prefixes), tmp_path / "cache")
    loader = make_loader(source, mesh(), global_batch_size=B, num_steps=STEPS)
    list(loader)
    server = serve_metrics(loader.metrics, 0)
    try:
        assert server.address == "127.0.0.1" and server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=30) as answer:
            text = answer.read().decode()
    finally:
        server.close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }
    m = loader.metrics()
    assert samples[("jaxblend_loader_steps_total", ())] == STEPS
    assert samples[("jaxblend_loader_tokens_total", ())] == m.tokens
    assert samples[("jaxblend_loader_wait_seconds_total", ())] == pytest.approx(m.wait_seconds)
    assert samples[("jaxblend_loader_read_bytes_total", (("store", "local"),))] == (
        m.stores["local"].bytes
    )
    for prefix in prefixes:
        assert samples[("jaxblend_loader_dataset_read_bytes_total", (("dataset", prefix),))] == (
            m.dataset_bytes[prefix]
        )
    assert ("jaxblend_loader_read_ahead_steps", ()) in samples


def test_endpoint_on_a_port_in_use_is_one_line(prefixes, tmp_path):
    first = serve_metrics(LoaderMetrics, 0)
    try:
        with pytest.raises(OSError, match=rf"127.0.0.1:{first.port} .*--metrics_port"):
            serve_metrics(LoaderMetrics, first.port)
    finally:
        first.close()


# ------------------------------------------------------------------------------------ buckets


def _bucket_source(server, prefixes, tmp_path, **options):
    run = f"telemetry/{next(_names)}"
    urls = [server.upload(p, f"{run}/{os.path.basename(p)}") for p in prefixes]
    access = DataAccess.from_env(object_store=ObjectStoreOptions.from_env(**options))
    source = _source(_weighted(urls), tmp_path / f"cache{next(_names)}", access)
    source.get_batch(np.arange(2))  # opens the buckets' kvstores before the counting starts
    return source, urls, run


def test_bucket_requests_match_the_server_count(object_store, prefixes, tmp_path):
    store = object_store.scheme
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        source, urls, _ = _bucket_source(object_store, prefixes, tmp_path)
        proxy.reset()
        loader = make_loader(source, mesh(), global_batch_size=B, num_steps=STEPS)
        assert len(list(loader)) == STEPS
        m = loader.metrics()
        # every request the server saw: counted once, or as a retry (a loaded server may fail
        # one). Retries are TensorStore's per-process count for the store kind, so retries of
        # other reads in this process (an earlier test's, under pytest-xdist) count too: the
        # server's figure lies between the requests and the requests plus the retries.
        counted = m.stores[store]
        assert 0 < counted.requests <= proxy.requests <= counted.requests + counted.retries
    figures = m.stores[store]
    assert set(m.stores) == {store}
    assert figures.bytes >= STEPS * B * (SEQ + 1) * 2  # coalesced ranges may span gaps
    assert sum(m.dataset_bytes.values()) == figures.bytes and set(m.dataset_bytes) == set(urls)
    assert sum(figures.latency_counts) == figures.requests  # each request timed
    assert 0 < figures.latency_p50 <= figures.latency_p99


def test_retries_are_counted(object_store, prefixes, tmp_path):
    store = object_store.scheme
    options = {"max_retries": 6, "initial_retry_delay": 0.05, "max_retry_delay": 0.2}
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        source, _, _ = _bucket_source(object_store, prefixes, tmp_path, **options)
        proxy.reset()
        proxy.fail_next(2, 503)
        loader = make_loader(source, mesh(), global_batch_size=B, num_steps=STEPS)
        assert len(list(loader)) == STEPS
        m = loader.metrics()
        assert m.stores[store].retries >= 2  # the two failures (and any other read's retries)
        assert m.stores[store].requests == proxy.requests - 2


class _Released(logging.Handler):
    """Keeps the stall lines; releases the held object once a line no longer names `answering`
    (its requests were answered: on a loaded machine that may take a few lines), or after 40."""

    def __init__(self, proxy, answering: str):
        super().__init__(logging.WARNING)
        self.proxy, self.answering, self.lines = proxy, answering, []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("loader stalled"):
            self.lines.append(message)
            if self.answering not in message or len(self.lines) >= 40:
                self.proxy.release()


def test_stall_report_names_the_held_object(object_store, prefixes, tmp_path):
    logger = logging.getLogger("jaxblend.loading")
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        source, urls, run = _bucket_source(object_store, prefixes, tmp_path)
        expected = [source.get_batch(np.arange(k * B, (k + 1) * B)) for k in range(STEPS)]
        handler = _Released(proxy, f"{urls[0]}.bin")
        logger.addHandler(handler)
        try:
            proxy.hold(f"{run}/b.bin")
            loader = make_loader(source, mesh(), global_batch_size=B, num_steps=STEPS,
                                 telemetry=TelemetryOptions(stall_threshold=0.5))
            batches = list(loader)  # the run goes on once the object answers again
        finally:
            logger.removeHandler(handler)
            proxy.release()
    assert len(batches) == STEPS
    for got, want in zip(batches, expected):
        np.testing.assert_array_equal(np.asarray(got["inputs"]), want["inputs"])
    for line in handler.lines:  # repeated while the object is held, naming it every time
        assert line.startswith("loader stalled: step 0 not ready after ")
        assert "requests pending, oldest: " in line
        assert f"{urls[1]}.bin bytes [" in line  # the held object, with its byte range
        assert f"{object_store.scheme} retries since" in line and "steps being read: 0 (" in line
    assert f"{urls[0]}.bin" not in handler.lines[-1]  # the other object answered
    assert loader.metrics().stalls >= len(handler.lines) >= 1


# ------------------------------------------------------------------------------------ pieces


class _FakeRead:
    def __init__(self, name, spans):
        self.name, self.spans = name, spans

    def unanswered(self):
        return self.spans


def test_stall_line_lists_the_oldest_requests_first_and_counts_the_rest():
    pending = PendingReads()
    reads = [_FakeRead(f"gs://b/d{i}.bin", [(i * 10, i * 10 + 5)]) for i in range(5)]
    for i, read in enumerate(reads):
        pending.register(read, "memory", submitted=100.0 + i)
    pending.register(_FakeRead("gs://b/done.bin", []), "memory", submitted=50.0)
    pending.steps.update({7: 99.0, 8: 101.0})
    watch = StallWatch(30.0, pending)
    try:
        line = watch.line(7, 12.5, now=112.0)
    finally:
        watch.stop()
    assert line == (
        "loader stalled: step 7 not ready after 12.5 s; 5 requests pending, oldest: "
        "gs://b/d0.bin bytes [0, 5) for 12.0 s, 0 memory retries since; "
        "gs://b/d1.bin bytes [10, 15) for 11.0 s, 0 memory retries since; "
        "gs://b/d2.bin bytes [20, 25) for 10.0 s, 0 memory retries since (and 2 more); "
        "steps being read: 7 (13.0 s), 8 (11.0 s)"
    )
    pending.unregister(reads[0])
    assert len(pending.pending(now=112.0)) == 4


def test_stall_line_without_requests_says_where_reads_run():
    watch = StallWatch(30.0, PendingReads(), worker_count=2)
    try:
        assert watch.line(3, 40.0).endswith(
            "reads run in 2 Grain worker processes, whose requests are not visible here"
        )
    finally:
        watch.stop()


def test_latency_quantiles_and_windows():
    counts = np.zeros(LATENCY_BOUNDS.size + 1, np.int64)
    fast, slow = np.searchsorted(LATENCY_BOUNDS, [0.01, 0.5])
    counts[fast], counts[slow] = 98, 2
    later = StoreMetrics(1000, 100, 1, tuple(counts.tolist()), 1.98)
    assert 0.01 <= later.latency_p50 < 0.01 * 1.2  # a bucket's upper bound: at most 19% above
    assert 0.5 <= later.latency_p99 < 0.5 * 1.2  # 2 of 100 were slow
    counts[fast] -= 90
    earlier = StoreMetrics(200, 10, 1, tuple(counts.tolist()), 1.08)
    window = later.since(earlier)  # the last 90 requests, all fast
    assert (window.bytes, window.requests, window.retries) == (800, 90, 0)
    assert sum(window.latency_counts) == 90
    assert 0.01 <= window.latency_p99 < 0.01 * 1.2
    assert StoreMetrics().latency_p50 is None


@pytest.mark.parametrize("bad", [{"stall_threshold": -1}, {"stall_threshold": "10"},
                                 {"collect": 1}])
def test_invalid_options(bad):
    with pytest.raises((TypeError, ValueError), match="TelemetryOptions"):
        TelemetryOptions(**bad)

"""A Prometheus endpoint per host for a loader's figures (the `prometheus_client` package).

`serve_metrics(loader.metrics, port)` starts an HTTP server (bound to 127.0.0.1 unless told
otherwise) whose `/metrics` page is built at each scrape from one `LoaderMetrics` snapshot:
nothing is counted twice and the loader's hot path is untouched. Names follow Prometheus
conventions (`jaxblend_loader_` prefix, base units, `_total` for counters); docs/telemetry.md
lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from jaxblend.loading.telemetry import LATENCY_BOUNDS, PROMETHEUS_EVERY, LoaderMetrics

PREFIX = "jaxblend_loader_"


class LoaderCollector:
    """A `prometheus_client` collector of one loader's figures.

    Args:
      metrics: returns the loader's cumulative figures (`StepLoader.metrics`).
    """

    def __init__(self, metrics: Callable[[], LoaderMetrics]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[object]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        m = self.metrics()
        for name, doc, value in (
            ("steps", "Batches handed to the consumer.", m.steps),
            ("tokens", "Tokens of those batches loaded by this process.", m.tokens),
            ("wait_seconds", "Time the consumer waited in next() for batches.", m.wait_seconds),
            ("read_seconds", "Time spent reading steps, summed over concurrent reads.",
             m.read_seconds),
            ("assemble_seconds", "Time turning read steps into device batches.",
             m.assemble_seconds),
            ("stalls", "Stall reports written.", m.stalls),
        ):
            yield CounterMetricFamily(PREFIX + name, doc, value=value)
        for name, doc, value in (
            ("elapsed_seconds", "Seconds since the loader started.", m.elapsed_seconds),
            ("read_ahead_steps", "Steps whose reads began and that the loader has not taken yet.",
             m.read_ahead_steps),
            ("read_ahead_window_steps", "The adaptive read-ahead window.", m.read_ahead_window),
            ("step_bytes", "Bytes of the last step's record as read.", m.step_bytes),
        ):
            if value is not None:  # None: not measured (worker processes, fixed read-ahead)
                yield GaugeMetricFamily(PREFIX + name, doc, value=value)
        per_store = {
            "read_bytes": ("Bytes read, per store.", lambda s: s.bytes),
            "read_requests": ("Range requests issued, per store.", lambda s: s.requests),
            "read_retries": ("Retries TensorStore counted, per store kind.", lambda s: s.retries),
        }
        for name, (doc, value) in per_store.items():
            family = CounterMetricFamily(PREFIX + name, doc, labels=["store"])
            for store, figures in sorted(m.stores.items()):
                family.add_metric([store], value(figures))
            yield family
        latency = HistogramMetricFamily(
            PREFIX + "read_latency_seconds", "Seconds from submission to answer of each request.",
            labels=["store"],
        )
        for store, figures in sorted(m.stores.items()):
            if not figures.latency_counts:
                continue
            buckets, total = [], 0
            for i, count in enumerate(figures.latency_counts[:-1]):
                total += count
                if (i + 1) % PROMETHEUS_EVERY == 0:
                    buckets.append((repr(float(LATENCY_BOUNDS[i])), total))
            buckets.append(("+Inf", total + figures.latency_counts[-1]))
            latency.add_metric([store], buckets, figures.latency_sum)
        yield latency
        datasets = CounterMetricFamily(PREFIX + "dataset_read_bytes", "Bytes read, per dataset.",
                                       labels=["dataset"])
        for dataset, n in sorted(m.dataset_bytes.items()):
            datasets.add_metric([dataset], n)
        yield datasets


class MetricsServer:
    """A running endpoint; `close()` stops it.

    Attributes:
      address: the address it is bound to.
      port: its port (the one chosen by the system when 0 was asked).
    """

    def __init__(self, server, thread, address: str) -> None:
        self._server, self._thread = server, thread
        self.address = address
        self.port = int(server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(
    metrics: Callable[[], LoaderMetrics], port: int, address: str = "127.0.0.1"
) -> MetricsServer:
    """Serves `metrics()` (a loader's `metrics` method) on `http://address:port/metrics`.

    Args:
      metrics: returns the figures to publish, called at each scrape.
      port: the TCP port (0: any free one; see `MetricsServer.port`).
      address: the address to bind; 127.0.0.1 keeps the endpoint on this host, 0.0.0.0 opens it
        to the network.

    Raises:
      OSError: naming the address and port, if they cannot be bound (e.g. in use).
    """
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(LoaderCollector(metrics))
    try:
        server, thread = start_http_server(port, addr=address, registry=registry)
    except OSError as err:
        raise OSError(
            f"cannot serve loader metrics on {address}:{port} ({err.strerror or err}): choose "
            "another --metrics_port, or 0 for none"
        ) from None
    return MetricsServer(server, thread, address)

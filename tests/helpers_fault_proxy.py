"""A loopback HTTP proxy that adds latency and injects faults in front of an object-store server.

Standard library only. Every request a client sends to the proxy is forwarded to the upstream
server (fake-gcs-server or moto's S3 server) over a persistent connection per proxy thread, after
`delay` seconds; the answer is relayed back. Faults are armed on the live proxy:

* `fail_next(n, status)`: the next n requests get `status` (e.g. 503 or 429) without reaching the
  server;
* `stall()`: requests are held without an answer until `resume()` (a server that stops
  answering);
* `drop_next(n)`: the next n requests have their connection closed without an answer;
* `hold(part)`: requests whose object path contains `part` are held without an answer until
  `release()` (one object stops answering, the others do not).

The proxy serves only 127.0.0.1 and counts requests (`requests`), so tests can assert how many a
read needed; `LoggingProxy` also logs each request's method, object path and byte range. Used by the storage tests and `benchmarks/object_store.py`.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Self

_CONTROL = "/__faultproxy__/"
_HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade",
}


class _QuietServer(http.server.ThreadingHTTPServer):
    """Clients that hang up mid-answer (a timed-out read, a closed test) are not errors here."""

    request_queue_size = 1024  # a client opens dozens of connections at once; 5 drops SYNs

    def handle_error(self, request, client_address) -> None:
        return


class FaultProxy:
    """Proxy `http://127.0.0.1:<port>` -> `upstream` with latency and faults.

    Args:
      upstream: base URL of the real server, e.g. "http://127.0.0.1:4443".
      delay: seconds added before forwarding each request.
    """

    def __init__(self, upstream: str, delay: float = 0.0):
        parsed = urllib.parse.urlparse(upstream)
        self.upstream_host = parsed.hostname or "127.0.0.1"
        self.upstream_port = parsed.port or 80
        self.delay = delay
        self.requests = 0
        self._lock = threading.Lock()
        self._fail: list[int] = []
        self._drop = 0
        self._running = threading.Event()
        self._running.set()
        self._held: str | None = None
        self._released = threading.Event()
        self._released.set()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL clients use instead of the upstream's."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail_next(self, n: int, status: int = 503) -> None:
        """The next `n` requests are answered with `status` without reaching the server."""
        with self._lock:
            self._fail.extend([status] * n)

    def drop_next(self, n: int) -> None:
        """The next `n` requests lose their connection without an answer."""
        with self._lock:
            self._drop += n

    def stall(self) -> None:
        """Holds every request without an answer until `resume()`."""
        self._running.clear()

    def resume(self) -> None:
        """Ends `stall()`."""
        self._running.set()

    def hold(self, part: str) -> None:
        """Holds every request whose decoded path contains `part` until `release()`."""
        self._released.clear()
        self._held = part

    def release(self) -> None:
        """Ends `hold()`: the held requests go on."""
        self._held = None
        self._released.set()

    def reset(self) -> None:
        """Clears faults and the request count; keeps the delay."""
        with self._lock:
            self._fail.clear()
            self._drop = 0
            self.requests = 0
        self._running.set()

    def close(self) -> None:
        """Stops serving (stalled and held requests are released first)."""
        self._running.set()
        self.release()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_fault(self) -> tuple[int | None, bool]:
        with self._lock:
            self.requests += 1
            if self._drop:
                self._drop -= 1
                return None, True
            if self._fail:
                return self._fail.pop(0), False
        return None, False

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else headers and body meet delayed ACKs (40 ms)

            def log_message(self, *args: object) -> None:  # quiet
                return

            def _forward(self) -> None:
                if self.path.startswith(_CONTROL):
                    self._control()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                status, drop = proxy._next_fault()
                while not proxy._running.wait(0.5):
                    pass
                held = proxy._held
                if held is not None and held in urllib.parse.unquote(self.path):
                    proxy._released.wait()
                if drop:
                    self.close_connection = True
                    self.connection.close()
                    return
                if proxy.delay:
                    time.sleep(proxy.delay)
                if status is not None:
                    payload = b'{"error": {"code": %d, "message": "injected"}}' % status
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                for attempt in range(2):  # once more on a fresh connection if the kept one died
                    conn = self._upstream()
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                        break
                    except (OSError, http.client.HTTPException):
                        conn.close()
                        self._conn = None
                        if attempt:
                            self.close_connection = True
                            self.connection.close()
                            return
                self.send_response(resp.status, resp.reason)
                for key, value in resp.getheaders():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _control(self) -> None:
                command = self.path[len(_CONTROL):]
                if command == "reset":
                    proxy.reset()
                payload = json.dumps({"requests": proxy.requests}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _upstream(self) -> http.client.HTTPConnection:
                conn = getattr(self, "_conn", None)
                if conn is None:
                    conn = http.client.HTTPConnection(
                        proxy.upstream_host, proxy.upstream_port, timeout=60
                    )
                    self._conn = conn
                return conn

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward

        return Handler


class LoggingProxy(FaultProxy):
    """A `FaultProxy` that also logs `(method, object path, Range header)` of every request
    (`log`, in arrival order)."""

    def __init__(self, upstream: str, delay: float = 0.0):
        self.log: list[tuple[str, str, str | None]] = []
        self._log_lock = threading.Lock()
        super().__init__(upstream, delay)

    def _handler_class(self):
        base = super()._handler_class()
        proxy = self

        class Logged(base):
            def _forward(self) -> None:
                with proxy._log_lock:
                    proxy.log.append(
                        (self.command, urllib.parse.unquote(self.path), self.headers.get("Range"))
                    )
                base._forward(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _forward

        return Logged


class ProxyProcess:
    """A latency proxy with a fixed delay in a process of its own, for benchmarks.

    By default a byte relay (asyncio): each request (an HTTP request line arriving from the
    client) waits `delay` seconds before it is passed upstream, answers flow back untouched. It
    costs far less per request than the HTTP-parsing `FaultProxy`, whose faults benchmarks do not
    need; `relay=False` runs a `FaultProxy` instead. Its Python work does not compete with the
    measured process for the GIL.

    Args:
      upstream: base URL of the real server.
      delay: seconds added before forwarding each request.
      relay: byte relay (True) or HTTP-parsing `FaultProxy` (False).
    """

    def __init__(self, upstream: str, delay: float = 0.0, relay: bool = True):
        self._process = subprocess.Popen(
            [sys.executable, __file__, "--upstream", upstream, "--delay", str(delay)]
            + (["--relay"] if relay else []),
            stdout=subprocess.PIPE, text=True,
        )
        line = self._process.stdout.readline().strip()
        if not line.startswith("http://"):
            self._process.kill()
            raise RuntimeError(f"fault proxy for {upstream} did not start: {line!r}")
        self.url = line

    @property
    def requests(self) -> int:
        """Requests forwarded (or faulted) since the start or the last `reset()`."""
        return self._call("requests")

    def reset(self) -> None:
        """Zeroes the request count."""
        self._call("reset")

    def _call(self, command: str) -> int:
        with urllib.request.urlopen(self.url + _CONTROL + command, timeout=10) as r:
            return json.load(r)["requests"]

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(10)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_METHODS = (b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ", b"PATCH ")


async def _relay(upstream: str, delay: float, ready) -> None:
    """A TCP relay adding `delay` before each request goes upstream (see `LatencyRelay`)."""
    import asyncio

    parsed = urllib.parse.urlparse(upstream)
    state = {"requests": 0}

    async def pump(reader, writer, delayed: bool) -> None:
        try:
            while data := await reader.read(1 << 16):
                if delayed and data.startswith(_METHODS):
                    state["requests"] += 1
                    if delay:
                        await asyncio.sleep(delay)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(reader, writer) -> None:
        head = await reader.read(1 << 16)
        if head.startswith(b"GET " + _CONTROL.encode()):
            if b"reset" in head.split(b" ", 2)[1]:
                state["requests"] = 0
            body = json.dumps({"requests": state["requests"]}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(parsed.hostname, parsed.port)
        if head:
            if head.startswith(_METHODS):
                state["requests"] += 1
                if delay:
                    await asyncio.sleep(delay)
            up_writer.write(head)
        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    ready(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    async with server:
        await server.serve_forever()


def _main() -> None:
    parser = argparse.ArgumentParser(description="Latency proxy on loopback (prints its URL).")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--relay", action="store_true", help="byte relay (fast, latency only)")
    args = parser.parse_args()
    if args.relay:
        import asyncio

        asyncio.run(_relay(args.upstream, args.delay, lambda url: print(url, flush=True)))
        return
    proxy = FaultProxy(args.upstream, args.delay)
    print(proxy.url, flush=True)
    try:
        proxy._thread.join()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    _main()

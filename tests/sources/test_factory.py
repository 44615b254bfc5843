"""`open_gpt_sources` with an explicit `DataAccess`: the access (endpoint, map store, identity
memo) reaches every layer and every Grain worker, with nothing taken from the environment."""

from __future__ import annotations

import pickle

import jax
import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index
from jaxblend.access import DataAccess, IdentityStoreOptions, MapStoreOptions, ObjectStoreOptions
from jaxblend.loading import PrefetchOptions, make_loader
from jaxblend.map_store import bucket
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources

SEQ, B = 16, 8
OPTIONS = GPTSchemaOptions(seq_length=SEQ)
ENDPOINT_ENVS = ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


@pytest.fixture(scope="module")
def local_prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("factory")
    rng = np.random.default_rng(8)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(1, 50), vocab=(1, 700))
        for n, d in (("a", 70), ("b", 110))
    ]


def _config(prefixes) -> index.GPTDataConfig:
    return index.GPTDataConfig(
        blend=["30", prefixes[0], "70", prefixes[1]], split="90,10,0", seq_length=SEQ, seed=9,
        num_samples=(B * 4, B, None),
    )


def _batches(source, workers: int) -> list[dict[str, np.ndarray]]:
    mesh = jax.make_mesh((8,), ("data",))
    loader = make_loader(
        source, mesh, global_batch_size=B, num_steps=3, prefetch=PrefetchOptions(worker_count=workers)
    )
    return [{k: np.asarray(v) for k, v in batch.items()} for batch in loader]


def test_explicit_access_reaches_the_map_store_and_a_worker(
    s3_server, local_prefixes, tmp_path, monkeypatch
):
    with s3_server.pointed_at():
        urls = [s3_server.upload(p, f"factory/{p.rsplit('/', 1)[1]}") for p in local_prefixes]
    for name in (*ENDPOINT_ENVS, "JAXBLEND_IDENTITY_CACHE", "JAXBLEND_INDEX_MIRROR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # a default mirror would land here
    maps_url = s3_server.prefix_url("factory/maps")
    access = DataAccess(
        object_store=ObjectStoreOptions(s3_endpoint=s3_server.url, max_retries=1),
        maps=MapStoreOptions(location=maps_url, mirror=str(tmp_path / "mirror"), builder=True),
        identity=IdentityStoreOptions(local_dir=str(tmp_path / "memo")),
    )
    remote = open_gpt_sources(_config(urls), OPTIONS, access=access)["train"]
    # The maps were built into the bucket map store (through the given mirror) ...
    committed = bucket.Bucket(maps_url, access.object_store)
    names = [p.parent.name for p in (tmp_path / "mirror").rglob("manifest.json")]
    assert names and all(committed.committed(n) for n in names)
    assert not (tmp_path / "jaxblend-index-mirror").exists()
    # ... the bucket datasets' identities went to <maps>/identity/ (the access's own default) ...
    with s3_server.pointed_at():
        keys = [bytes(k).decode() for k in s3_server.kvstore().list().result()]
    assert any(k.startswith("factory/maps/identity/") for k in keys), keys
    # ... and a Grain worker, which re-opens the split from the pickled access, reads the same bytes
    # as this process and as the local files.
    assert pickle.loads(pickle.dumps(remote)).access == access
    inline, worker = _batches(remote, 0), _batches(remote, 1)
    local = _batches(open_gpt_sources(_config(local_prefixes), OPTIONS)["train"], 0)
    for a, b, c in zip(inline, worker, local, strict=True):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].tobytes() == b[name].tobytes(), name
        np.testing.assert_array_equal(a["inputs"], c["inputs"])

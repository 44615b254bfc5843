"""Preprocessing records the identity of what it wrote: no later open reads the `.bin` to identify
it (local output, and gs:// / s3:// output against fake-gcs-server and moto)."""

from __future__ import annotations

import hashlib
import json
import tempfile
import uuid
from pathlib import Path

import pytest
from helpers_fault_proxy import FaultProxy

from jaxblend.access import DataAccess, IdentityStoreOptions
from jaxblend.preprocess import pipeline
from jaxblend.storage import IndexedDataset
from jaxblend.storage.dataset_identity import content_digest
from tests.preprocess.conftest import small_run_config, write_jsonl


def _no_bin_reads(monkeypatch) -> None:
    def refuse(*args):
        raise AssertionError("a dataset preprocessing wrote must not be read to identify it")

    monkeypatch.setattr(content_digest, "local_file_digest", refuse)
    monkeypatch.setattr(content_digest, "streamed_digest", refuse)


def _computed(prefix: str) -> str:
    """The fingerprint computed from the bytes (no memo)."""
    access = DataAccess.from_env(identity=IdentityStoreOptions(enabled=False))
    return IndexedDataset(prefix, access=access).fingerprint


def test_local_output_is_identified_without_reading(tmp_path, corpus_docs, monkeypatch) -> None:
    src = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs[:60])
    result = pipeline.preprocess(small_run_config(str(tmp_path / "out" / "c"), [src]))
    prefix = result.outputs["text"]
    record = json.loads((tmp_path / "out" / ".jaxblend" / "c.preprocess.json").read_text())
    assert record["bin_md5"]["text"] == hashlib.md5(Path(prefix + ".bin").read_bytes()).hexdigest()
    expected = _computed(prefix)
    _no_bin_reads(monkeypatch)
    assert IndexedDataset(prefix).fingerprint == expected


def test_bucket_output_is_identified_without_requests(
    object_store, tmp_path, corpus_docs, monkeypatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    src = write_jsonl(str(tmp_path / "in.jsonl"), corpus_docs[:60])
    url = object_store.prefix_url(f"ident-{uuid.uuid4().hex}/corpus")
    with object_store.pointed_at():
        result = pipeline.preprocess(small_run_config(url, [src]))
        expected = _computed(result.outputs["text"])
    _no_bin_reads(monkeypatch)
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        ds = IndexedDataset(result.outputs["text"])
        assert ds.fingerprint == expected
        assert proxy.requests == 2  # `.idx` header and `.bin` generation: remembered at publish


@pytest.mark.parametrize("size", [0, 5, 40_000])
def test_scan_outputs_md5_and_max(tmp_path, size, monkeypatch) -> None:
    import numpy as np

    from jaxblend.preprocess import manifest as manifest_lib

    monkeypatch.setattr(manifest_lib, "SCAN_TOKENS", 999)  # several blocks, the last one shorter

    tokens = np.random.default_rng(size).integers(0, 60_000, size, dtype=np.uint16)
    (tmp_path / "d.bin").write_bytes(tokens.tobytes())
    max_ids, md5s = manifest_lib.scan_outputs({"text": str(tmp_path / "d")}, np.dtype(np.uint16))
    assert md5s == {"text": hashlib.md5(tokens.tobytes()).hexdigest()}
    assert max_ids == {"text": int(tokens.max()) if size else None}

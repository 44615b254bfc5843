"""Dataset identity from the store's own checksums (GCS md5Hash, S3 single-part ETag).

Against fake-gcs-server and moto (the `object_store` fixture runs each test on both): the
fingerprint taken from the store equals the one computed from a local copy, and the first open of a
bucket dataset reads no `.bin` bytes for it. An S3 multipart object (whose ETag is no MD5) falls
back to reading the object once.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
from pathlib import Path

import numpy as np
import pytest
from helpers_fault_proxy import FaultProxy

from jaxblend.access import ObjectStoreOptions
from jaxblend.storage import IndexedDataset, IndexFormatError, ObjectStoreError
from jaxblend.storage.dataset_identity import content_digest, store_checksums

from ..conftest import Corpus

_names = itertools.count()


def _upload(server, corpus: Corpus) -> str:
    return server.upload(corpus.prefix, f"sums/ds{next(_names)}")


def _no_bin_reads(monkeypatch) -> None:
    def refuse(*args):
        raise AssertionError("the `.bin` must not be read to identify this dataset")

    monkeypatch.setattr(content_digest, "streamed_digest", refuse)
    monkeypatch.setattr(content_digest, "local_file_digest", refuse)


def test_store_checksum_gives_the_computed_fingerprint(object_store, corpus, monkeypatch) -> None:
    local = IndexedDataset(corpus.prefix).fingerprint  # computed by reading the local `.bin`
    url = _upload(object_store, corpus)
    _no_bin_reads(monkeypatch)
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        ds = IndexedDataset(url)
        _ = ds.sequence_lengths  # first sight: header, `.bin` generation, `.idx`, size probes
        before = proxy.requests
        assert ds.fingerprint == local
        extra = proxy.requests - before
    assert extra == (1 if object_store.scheme == "gs" else 0)  # GCS: one metadata request


def test_first_open_costs_a_few_small_requests(object_store, corpus, monkeypatch) -> None:
    url = _upload(object_store, corpus)
    _no_bin_reads(monkeypatch)
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        _ = IndexedDataset(url).fingerprint
    # `.idx` header, `.bin` generation, the whole `.idx`, two 1-byte `.bin` size probes; GCS: the
    # object's metadata. Nothing else: the `.bin` is never read.
    assert proxy.requests == 5 + (object_store.scheme == "gs")


def _multipart_upload(server, key: str, data: bytes) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    bucket = server.prefix_url("").split("/")[2]
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)
    part = client.upload_part(
        Bucket=bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=data
    )
    client.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )


def test_s3_multipart_object_is_read_once(s3_server, corpus, monkeypatch) -> None:
    local = IndexedDataset(corpus.prefix).fingerprint
    url = _upload(s3_server, corpus)
    path = url.split("/", 3)[3]
    _multipart_upload(s3_server, path + ".bin", Path(corpus.prefix + ".bin").read_bytes())
    real, calls = content_digest.streamed_digest, []
    monkeypatch.setattr(content_digest, "streamed_digest", lambda *a: calls.append(a) or real(*a))
    with s3_server.pointed_at():
        ds = IndexedDataset(url)
        assert store_checksums.s3_etag_md5(ds._handles().bin_generation) is None  # "<hex>-1"
        assert ds.fingerprint == local
        assert len(calls) == 1
        again = IndexedDataset(url)  # remembered under the multipart ETag: not read again
        assert again.fingerprint == local and len(calls) == 1


def test_gcs_object_rewritten_after_open_is_refused(gcs_server, corpus) -> None:
    url = _upload(gcs_server, corpus)
    with gcs_server.pointed_at():
        ds = IndexedDataset(url)
        _ = ds.sequence_lengths
        gcs_server.write(
            url.split("/", 3)[3] + ".bin", Path(corpus.prefix + ".bin").read_bytes()
        )  # same bytes, new generation
        with pytest.raises(IndexFormatError, match=r"\.bin: the object was rewritten"):
            _ = ds.fingerprint


def test_gcs_credentials_missing_is_one_clear_error(gcs_server, corpus, monkeypatch) -> None:
    import google.auth

    url = _upload(gcs_server, corpus)
    with gcs_server.pointed_at():
        ds = IndexedDataset(url)
        _ = ds.sequence_lengths
        os.environ.pop("GOOGLE_AUTH_TOKEN_FOR_TESTING")  # `pointed_at` restores it
        monkeypatch.setattr(store_checksums, "_credentials", None)

        def no_credentials(**kwargs):
            raise google.auth.exceptions.DefaultCredentialsError("none found")

        monkeypatch.setattr(google.auth, "default", no_credentials)
        with pytest.raises(ObjectStoreError, match=r"\.bin: no GCS credentials .* `gcloud auth"):
            _ = ds.fingerprint


def test_gcs_metadata_denied_names_the_object_and_gcloud_login(gcs_server, corpus) -> None:
    url = _upload(gcs_server, corpus)
    with gcs_server.pointed_at():
        ds = IndexedDataset(url)
        _ = ds.sequence_lengths
    with FaultProxy(gcs_server.url) as proxy, gcs_server.pointed_at(proxy.url):
        proxy.fail_next(1000, 403)
        with pytest.raises(ObjectStoreError) as info:
            _ = ds.fingerprint
    message = str(info.value)
    assert message.startswith(f"{url}.bin: access denied while reading the object's metadata (HTTP 403)")
    assert "gcloud auth application-default login" in message and "\n" not in message


# --------------------------------------------------------------------------- parsing, no server


def _stamp(generation: int) -> bytes:
    return b"\x00" + generation.to_bytes(8, "little")


def test_gcs_metadata_is_bound_to_the_generation() -> None:
    data = b"tokens"
    meta = {
        "generation": "1234",
        "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),
        "crc32c": "AAAAAQ==",
    }
    got = store_checksums.parse_gcs_metadata(meta, _stamp(1234), "x.bin")
    assert got.md5 == hashlib.md5(data).digest() and got.crc32c == 1
    with pytest.raises(IndexFormatError, match="x.bin: the object was rewritten"):
        store_checksums.parse_gcs_metadata(meta, _stamp(1235), "x.bin")


def test_gcs_composite_object_has_no_md5() -> None:
    got = store_checksums.parse_gcs_metadata(
        {"generation": "7", "crc32c": "AAAAAQ==", "componentCount": 2}, _stamp(7), "x.bin"
    )
    assert got.md5 is None and got.crc32c == 1 and "composite" in got.source


def test_gcs_composite_object_falls_back_to_reading(gcs_server, corpus, monkeypatch) -> None:
    local = IndexedDataset(corpus.prefix).fingerprint
    url = _upload(gcs_server, corpus)
    real = store_checksums.parse_gcs_metadata

    def composite(meta, stamp, name):
        return real({k: v for k, v in meta.items() if k != "md5Hash"}, stamp, name)

    monkeypatch.setattr(store_checksums, "parse_gcs_metadata", composite)
    real_read, calls = content_digest.streamed_digest, []
    monkeypatch.setattr(
        content_digest, "streamed_digest", lambda *a: calls.append(a) or real_read(*a)
    )
    with gcs_server.pointed_at():
        assert IndexedDataset(url).fingerprint == local
    assert len(calls) == 1


@pytest.mark.parametrize(
    "etag, md5",
    [
        (b'\x00"ff4e9d785ecd39da2b1d0ce2162d1147"', "ff4e9d785ecd39da2b1d0ce2162d1147"),
        (b'\x00"b80965183800174acbfed42ed19781c2-2"', None),
        (b"\x00\xff\xfe", None),
        (b"", None),
    ],
)
def test_s3_etag(etag: bytes, md5: str | None) -> None:
    got = store_checksums.s3_etag_md5(etag)
    assert (got.hex() if got else None) == md5


def test_local_and_memory_stores_report_nothing() -> None:
    got = store_checksums.reported(
        {"driver": "memory"}, "a.bin", b"\x00x", "a.bin", ObjectStoreOptions()
    )
    assert got.md5 is None


def test_reported_md5_equals_computed(object_store, tmp_path: Path) -> None:
    data = np.random.default_rng(5).bytes(100_003)
    key = f"sums/blob{next(_names)}"
    object_store.write(key, data)
    with object_store.pointed_at():
        kv = object_store.kvstore()
        stamp = bytes(kv.read(key, byte_range=slice(0, 0)).result().stamp.generation)
        spec = ObjectStoreOptions.from_env().complete_spec(kv.spec().to_json())
        got = store_checksums.reported(spec, key, stamp, key, ObjectStoreOptions.from_env())
    (tmp_path / "blob").write_bytes(data)
    computed = content_digest.local_file_digest(str(tmp_path / "blob"), len(data), "blob")
    assert got.md5 is not None and got.md5.hex() == computed == hashlib.md5(data).hexdigest()

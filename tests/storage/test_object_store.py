"""IndexedDataset against real object-store servers (fake-gcs-server, moto S3) on loopback.

Every test runs against both servers (the `object_store` fixture). Reads must equal the same
files read from local disk, byte for byte; every bad case gives one error naming the URL.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from helpers_fault_proxy import FaultProxy

from jaxblend.access import DataAccess, IdentityStoreOptions, ObjectStoreOptions
from jaxblend.storage import IndexedDataset, IndexFormatError, ObjectStoreError
from jaxblend.storage.sequence_spans import SequenceSpans

from .conftest import Corpus, random_docs, read_spans, write_corpus

_names = itertools.count()

FAST_FAIL = {"max_retries": 2, "initial_retry_delay": 0.05, "max_retry_delay": 0.1,
             "request_timeout": 5.0}


def _access(**options) -> DataAccess:
    """Access with these object-store options over the environment's endpoint (read now)."""
    return DataAccess.from_env(object_store=ObjectStoreOptions.from_env(**options))


def _upload(server, corpus: Corpus) -> str:
    return server.upload(corpus.prefix, f"tok/ds{next(_names)}")


@pytest.fixture
def int32_corpus(tmp_path: Path, rng: np.random.Generator) -> Corpus:
    return write_corpus(str(tmp_path / "corpus32"), np.int32, random_docs(rng, np.int32, 30))


@pytest.mark.parametrize("which", ["corpus", "int32_corpus"])
def test_reads_equal_local_files(object_store, request, which: str) -> None:
    corpus = request.getfixturevalue(which)
    url = _upload(object_store, corpus)
    local, remote = IndexedDataset(corpus.prefix), IndexedDataset(url)
    assert remote.backend == "tensorstore" and remote.is_remote
    assert (len(remote), remote.dtype, remote.num_tokens, remote.num_documents) == (
        len(local), local.dtype, local.num_tokens, local.num_documents)
    for name in ("sequence_lengths", "sequence_pointers", "document_indices"):
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name))
    assert remote.fingerprint == local.fingerprint
    for i in range(len(local)):
        np.testing.assert_array_equal(remote.get(i), local.get(i))
    rng = np.random.default_rng(7)
    idx = rng.integers(0, len(local), 50)
    lens = local.sequence_lengths[idx]
    offs = (rng.random(50) * lens).astype(np.int64)
    for i, o in zip(idx.tolist(), offs.tolist()):
        np.testing.assert_array_equal(remote.get(i, o), local.get(i, o))
    np.testing.assert_array_equal(read_spans(remote, idx, offs, lens - offs),
                                  read_spans(local, idx, offs, lens - offs))
    for a, b in zip(remote[3:9], local[3:9], strict=True):
        np.testing.assert_array_equal(a, b)


def test_sequence_spans_mix_local_and_remote(object_store, corpus, int32_corpus) -> None:
    remote = IndexedDataset(_upload(object_store, int32_corpus))
    datasets = [IndexedDataset(corpus.prefix), remote, IndexedDataset(int32_corpus.prefix)]
    rng = np.random.default_rng(3)
    k = 300
    ds = rng.integers(0, 3, k)
    seq = np.array([rng.integers(0, len(datasets[d])) for d in ds])
    length = np.array([datasets[d].sequence_lengths[s] for d, s in zip(ds, seq)], np.int64)
    offset = np.zeros(k, np.int64)
    out_pos = np.cumsum(length) - length
    out = np.full(int(length.sum()), -1, np.int32)
    gather = SequenceSpans(datasets)
    gather.read(ds, seq, offset, length, out, out_pos)
    expected = np.concatenate([datasets[d].get(s) for d, s in zip(ds, seq)]).astype(np.int32)
    np.testing.assert_array_equal(out, expected)
    assert gather.requests > 0


def test_cached_open_fetches_two_small_objects(object_store, corpus) -> None:
    url = _upload(object_store, corpus)
    first = IndexedDataset(url)
    fingerprint = first.fingerprint  # validated, hashed, remembered
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        again = IndexedDataset(url)
        assert proxy.requests == 2  # index header + data-file generation, no index download
        assert again.fingerprint == fingerprint and proxy.requests == 2
        np.testing.assert_array_equal(again.get(3), first.get(3))  # the index is fetched now
        assert proxy.requests > 2
    # A rewritten index is a new object version: hashed again, so a different dataset is refused.
    other = write_corpus(str(Path(corpus.prefix).with_name("other")), np.uint16,
                         random_docs(np.random.default_rng(99), np.uint16, 40))
    path = url.split("/", 3)[3]
    object_store.write(path + ".idx", Path(other.prefix + ".idx").read_bytes())
    object_store.write(path + ".bin", Path(other.prefix + ".bin").read_bytes())
    changed = IndexedDataset(url)
    assert changed.fingerprint == IndexedDataset(other.prefix).fingerprint != fingerprint


def test_same_size_token_change_is_a_new_identity(object_store, corpus) -> None:
    """A `.bin` rewritten with other tokens of the same size: new generation, hashed, new identity."""
    url = _upload(object_store, corpus)
    fingerprint = IndexedDataset(url).fingerprint
    assert fingerprint == IndexedDataset(corpus.prefix).fingerprint
    data = bytearray(Path(corpus.prefix + ".bin").read_bytes())
    data[len(data) // 2] ^= 0x5A
    object_store.write(url.split("/", 3)[3] + ".bin", bytes(data))
    changed = IndexedDataset(url)
    assert changed.fingerprint != fingerprint
    Path(corpus.prefix + ".bin").write_bytes(data)
    assert IndexedDataset(corpus.prefix).fingerprint == changed.fingerprint


@pytest.mark.parametrize("how", ["environment", "index cache default"])
def test_identity_memo_in_a_bucket_is_shared(object_store, corpus, monkeypatch, how) -> None:
    """With the memo at a bucket URL, a version hashed by one host is known to every other host."""
    from jaxblend.storage.dataset_identity import content_digest

    url = _upload(object_store, corpus)
    memo_url = object_store.prefix_url(f"memo{next(_names)}/")
    if how == "environment":
        monkeypatch.setenv("JAXBLEND_IDENTITY_CACHE", memo_url)
        access = DataAccess.from_env
    else:  # what the data flags do for --data_cache_path=gs://...: <maps location>/identity/
        monkeypatch.delenv("JAXBLEND_IDENTITY_CACHE")
        location = memo_url.removesuffix("/")

        def access() -> DataAccess:
            return DataAccess.from_env(identity=IdentityStoreOptions()).with_maps(location=location)

        assert access().identity_store().shared_url == location + "/identity/"
    fingerprint = IndexedDataset(url, access=access()).fingerprint  # first sight: hashed, recorded
    assert object_store.kvstore().list().result()  # the entry is an object in the bucket
    assert object_store.kvstore().list().result()  # the entry is an object in the bucket

    def no_reads(*args):
        raise AssertionError("a remembered version must not be read again")

    monkeypatch.setattr(content_digest, "streamed_digest", no_reads)
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        again = IndexedDataset(url, access=access())
        assert again.fingerprint == fingerprint
        assert proxy.requests == 3  # index header, `.bin` generation, the memo entry


def test_reopened_dataset_that_changed_is_refused(object_store, corpus, int32_corpus) -> None:
    url = _upload(object_store, corpus)
    ds = IndexedDataset(url)
    path = url.split("/", 3)[3]
    object_store.write(path + ".idx", Path(int32_corpus.prefix + ".idx").read_bytes())
    object_store.write(path + ".bin", Path(int32_corpus.prefix + ".bin").read_bytes())
    ds.close()
    with pytest.raises(IndexFormatError, match="changed since this object was created"):
        ds.get(0)


def _expect(error: type[Exception], match: str, url: str, **kwargs) -> None:
    with pytest.raises(error, match=match) as info:
        ds = IndexedDataset(url, **kwargs)
        ds[:]
    assert url.split("://")[1] in str(info.value)  # names the URL
    assert "\n" not in str(info.value)


def test_missing_and_inconsistent_objects(object_store, corpus) -> None:
    url = _upload(object_store, corpus)
    path = url.split("/", 3)[3]
    data = Path(corpus.prefix + ".bin").read_bytes()
    object_store.write(path + ".bin", data[:-6])
    _expect(IndexFormatError, rf"\.bin: data file is (\d+|fewer than \d+) bytes but its index "
            rf"implies {len(data)} bytes", url)
    object_store.write(path + ".bin", data + b"\x00\x00")
    _expect(IndexFormatError, rf"\.bin: data file is (\d+|more than \d+) bytes but its index "
            rf"implies {len(data)}", url)
    object_store.write(path + ".bin", None)
    _expect(IndexFormatError, r"\.bin: data file does not exist", url)
    object_store.write(path + ".idx", None)
    _expect(IndexFormatError, r"\.idx: index file does not exist", url)
    object_store.write(path + ".bin", data)
    object_store.write(path + ".idx", b"MMIDIDX")
    _expect(IndexFormatError, r"\.idx: truncated index: 7 bytes", url)
    idx = Path(corpus.prefix + ".idx").read_bytes()
    object_store.write(path + ".idx", idx[:-5])
    _expect(IndexFormatError, r"\.idx: file is \d+ bytes but its header", url)


def test_no_such_bucket(object_store) -> None:
    _expect(IndexFormatError, r"index file does not exist", object_store.prefix_url("x/c", "no-such-bucket-jb"))


def test_transient_errors_are_retried(object_store, corpus) -> None:
    url = _upload(object_store, corpus)
    expected = IndexedDataset(corpus.prefix).get(5)
    options = {"max_retries": 6, "initial_retry_delay": 0.05, "max_retry_delay": 0.2}
    for status in (503, 429):
        with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
            proxy.fail_next(3, status)
            ds = IndexedDataset(url, access=_access(**options))
            np.testing.assert_array_equal(ds.get(5), expected)
            assert proxy.requests > 3


def test_persistent_errors_fail_clearly(object_store, corpus) -> None:
    url = _upload(object_store, corpus)
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        proxy.fail_next(1000, 503)
        _expect(ObjectStoreError, r"failed: ", url, access=_access(**FAST_FAIL))
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        proxy.drop_next(1000)
        _expect(ObjectStoreError, r"failed: ", url, access=_access(**FAST_FAIL))


def test_server_that_stops_answering_fails_within_the_timeout(object_store, corpus) -> None:
    url = _upload(object_store, corpus)
    options = {"request_timeout": 1.5, "max_retries": 1}
    with FaultProxy(object_store.url) as proxy, object_store.pointed_at(proxy.url):
        ds = IndexedDataset(url, access=_access(**options))
        ds.sequence_lengths  # noqa: B018 - fetch the index before the server stalls
        proxy.stall()
        with pytest.raises(ObjectStoreError, match=r"no answer within 1.5 s") as info:
            ds[:]
        assert url.split("://")[1] in str(info.value)
        proxy.stall()
        _expect(ObjectStoreError, r"no answer within 1.5 s", url, access=_access(**options))
        proxy.resume()


def test_pickled_dataset_keeps_its_access(s3_server, corpus, monkeypatch, tmp_path) -> None:
    import pickle

    with s3_server.pointed_at():
        url = _upload(s3_server, corpus)
    options = ObjectStoreOptions(s3_endpoint=s3_server.url, s3_region="us-east-1")
    memo = IdentityStoreOptions(local_dir=str(tmp_path / "memo"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    for name in ("JAXBLEND_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JAXBLEND_IDENTITY_CACHE", str(tmp_path / "elsewhere"))
    access = DataAccess(object_store=options, identity=memo)
    ds = pickle.loads(pickle.dumps(IndexedDataset(url, access=access)))
    assert ds.object_store == options
    np.testing.assert_array_equal(ds.get(2), IndexedDataset(corpus.prefix).get(2))
    ds.fingerprint  # noqa: B018 - hashed in this process: remembered in the pickled memo options
    assert list((tmp_path / "memo").iterdir()) and not (tmp_path / "elsewhere").exists()


def test_no_endpoint_means_no_environment_fallback(s3_server, monkeypatch) -> None:
    """Only `from_env` reads the environment: explicit options without an endpoint name none."""
    spec = {"driver": "s3", "bucket": "b", "path": "p"}
    with s3_server.pointed_at():
        assert "endpoint" not in ObjectStoreOptions().complete_spec(spec)
        assert ObjectStoreOptions.from_env().complete_spec(spec)["endpoint"] == s3_server.url


def test_endpoint_from_the_environment(s3_server, corpus, monkeypatch) -> None:
    with s3_server.pointed_at():
        url = _upload(s3_server, corpus)
        assert ObjectStoreOptions.from_env().s3_endpoint == s3_server.url
        np.testing.assert_array_equal(IndexedDataset(url).get(1), IndexedDataset(corpus.prefix).get(1))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    assert ObjectStoreOptions.from_env().s3_endpoint == "http://127.0.0.1:9"


@pytest.mark.parametrize("bad", [
    {"request_concurrency": 0}, {"max_retries": -1}, {"request_timeout": 0},
    {"s3_endpoint": "localhost:9000"},
])
def test_invalid_options(bad) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ObjectStoreOptions(**bad)

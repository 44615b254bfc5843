"""`.bin` content digests: a same-size change of the tokens changes the dataset's identity.

Local files here; the same rule against real object-store servers is in test_object_store.py.
"""

from __future__ import annotations

import hashlib
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from jaxblend.access import DataAccess
from jaxblend.storage import IndexedDataset, IndexFormatError
from jaxblend.storage.dataset_identity import content_digest
from jaxblend.storage.dataset_identity import memo as identity_memo

from ..conftest import Corpus


def _flip_middle_token(prefix: str) -> None:
    """Rewrites one token in the middle of `prefix.bin` in place: same size, new content."""
    time.sleep(0.05)  # past the file-system timestamp granularity
    path = Path(prefix + ".bin")
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid] ^= 0x5A
    with open(path, "r+b") as f:
        f.write(data)


def _reference_digest(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 5555])
def test_local_and_streamed_digests_agree(tmp_path: Path, monkeypatch, size: int) -> None:
    monkeypatch.setattr(content_digest, "CHUNK_BYTES", 1000)
    data = np.random.default_rng(size).bytes(size)
    path = tmp_path / "blob"
    path.write_bytes(data)
    local = content_digest.local_file_digest(str(path), size, "blob")
    streamed = content_digest.streamed_digest(size, lambda lo, hi: data[lo:hi], lambda b: b)
    assert local == streamed == _reference_digest(data)
    if size:
        changed = bytearray(data)
        changed[size // 2] ^= 1
        path.write_bytes(changed)
        assert content_digest.local_file_digest(str(path), size, "blob") != local


def test_short_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(b"abc")
    with pytest.raises(OSError, match="short.bin: short read"):
        content_digest.local_file_digest(str(path), 10, "short.bin")


def test_same_size_token_change_changes_the_fingerprint(corpus: Corpus) -> None:
    before = IndexedDataset(corpus.prefix).fingerprint
    _flip_middle_token(corpus.prefix)
    after = IndexedDataset(corpus.prefix).fingerprint
    assert after != before
    assert IndexedDataset(corpus.prefix, access=DataAccess(backend="tensorstore")).fingerprint == after


def test_settled_version_is_remembered_and_a_rewrite_misses(corpus: Corpus, monkeypatch) -> None:
    monkeypatch.setattr(identity_memo, "SETTLE_SECONDS", 0.0)
    fingerprint = IndexedDataset(corpus.prefix).fingerprint  # hashed and remembered
    real = content_digest.local_file_digest
    calls = []

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(content_digest, "local_file_digest", counting)
    assert IndexedDataset(corpus.prefix).fingerprint == fingerprint
    assert calls == []  # a version seen before: no `.bin` read
    _flip_middle_token(corpus.prefix)
    changed = IndexedDataset(corpus.prefix).fingerprint
    assert len(calls) == 1 and changed != fingerprint


def test_fresh_files_are_hashed_again(corpus: Corpus, monkeypatch) -> None:
    """A file changed less than SETTLE_SECONDS ago is not remembered (its stamp could repeat)."""
    monkeypatch.setattr(identity_memo, "SETTLE_SECONDS", 3600.0)
    real = content_digest.local_file_digest
    calls = []
    monkeypatch.setattr(
        content_digest, "local_file_digest", lambda *a: calls.append(a) or real(*a)
    )
    first = IndexedDataset(corpus.prefix).fingerprint
    assert IndexedDataset(corpus.prefix).fingerprint == first
    assert len(calls) == 2


def test_pickled_dataset_refuses_a_same_size_rewrite(corpus: Corpus) -> None:
    ds = IndexedDataset(corpus.prefix)
    _ = ds.fingerprint
    shipped = pickle.dumps(ds)
    _flip_middle_token(corpus.prefix)
    with pytest.raises(IndexFormatError, match=r"corpus\.bin: the dataset was rewritten"):
        pickle.loads(shipped).get(0)


def test_change_while_hashing_is_refused(corpus: Corpus, monkeypatch) -> None:
    real = content_digest.local_file_digest

    def racing(path, size, name):
        _flip_middle_token(corpus.prefix)
        return real(path, size, name)

    monkeypatch.setattr(content_digest, "local_file_digest", racing)
    ds = IndexedDataset(corpus.prefix)
    with pytest.raises(IndexFormatError, match="changed while it was being opened"):
        _ = ds.fingerprint

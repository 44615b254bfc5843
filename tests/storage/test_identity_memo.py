"""Where the identity memo keeps its entries, and that a bad entry is only a miss."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxblend.storage import identity_memo

IDENTITY = identity_memo.Identity("ab" * 16, num_tokens=10, bin_size=20)


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    monkeypatch.delenv(identity_memo.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(identity_memo, "_shared_url", None)
    return tmp_path / "xdg" / "jaxblend" / "identity"


def test_default_is_a_local_directory(no_env) -> None:
    assert identity_memo._store(remote_dataset=True) == no_env
    assert identity_memo._store(remote_dataset=False) == no_env


def test_shared_url_holds_bucket_datasets_only(no_env) -> None:
    identity_memo.set_shared_url("gs://b/run/index_cache/identity")
    assert identity_memo._store(remote_dataset=True) == "gs://b/run/index_cache/identity/"
    assert identity_memo._store(remote_dataset=False) == no_env  # local versions are per machine
    identity_memo.set_shared_url(None)
    assert identity_memo._store(remote_dataset=True) == no_env


def test_environment_wins(no_env, monkeypatch, tmp_path) -> None:
    identity_memo.set_shared_url("gs://b/identity/")
    monkeypatch.setenv(identity_memo.ENV, str(tmp_path / "mine"))
    assert identity_memo._store(remote_dataset=True) == tmp_path / "mine"
    monkeypatch.setenv(identity_memo.ENV, "off")
    assert identity_memo._store(remote_dataset=True) is None
    assert identity_memo.lookup("gs://b/d", b"1", b"2") is None


def test_round_trip_and_bad_entries_are_misses(no_env) -> None:
    identity_memo.record("/data/d", b"i1", b"b1", IDENTITY)
    assert identity_memo.lookup("/data/d", b"i1", b"b1") == IDENTITY
    assert identity_memo.lookup("/data/d", b"i1", b"b2") is None  # another version
    assert identity_memo.lookup("/data/other", b"i1", b"b1") is None
    for entry in no_env.iterdir():
        entry.write_text('{"url": "/data/d", "fingerprint": 3}')
    assert identity_memo.lookup("/data/d", b"i1", b"b1") is None


def test_local_version_changes_with_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    before, _ = identity_memo.local_version(str(path))
    import time

    time.sleep(0.05)
    path.write_bytes(b"abd")
    after, changed_at = identity_memo.local_version(str(path))
    assert after != before and changed_at > 0

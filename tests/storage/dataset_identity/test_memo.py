"""Where the identity memo keeps its entries (from the passed options only), and that a bad entry
is only a miss."""

from __future__ import annotations

from pathlib import Path

import pytest

from jaxblend.access import DataAccess, IdentityStoreOptions, MapStoreOptions, ObjectStoreOptions
from jaxblend.storage.dataset_identity import memo as identity_memo

IDENTITY = identity_memo.Identity("ab" * 16, num_tokens=10, bin_size=20)
STORE = ObjectStoreOptions()


@pytest.fixture
def default_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("JAXBLEND_IDENTITY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "jaxblend" / "identity"


def test_default_is_a_local_directory(default_dir) -> None:
    options = IdentityStoreOptions.from_env()
    assert identity_memo._store(options, remote_dataset=True) == default_dir
    assert identity_memo._store(options, remote_dataset=False) == default_dir


def test_shared_url_holds_bucket_datasets_only(default_dir) -> None:
    options = IdentityStoreOptions(local_dir=str(default_dir), shared_url="gs://b/run/index_cache/identity")
    assert identity_memo._store(options, remote_dataset=True) == "gs://b/run/index_cache/identity/"
    assert identity_memo._store(options, remote_dataset=False) == default_dir  # per machine


def test_bucket_map_store_shares_identities(default_dir) -> None:
    access = DataAccess(maps=MapStoreOptions(location="gs://b/run/index_cache"))
    assert access.identity_store().shared_url == "gs://b/run/index_cache/identity/"
    assert DataAccess(maps=MapStoreOptions(location="/local/cache")).identity_store().shared_url is None
    mine = DataAccess(
        maps=MapStoreOptions(location="gs://b/maps"),
        identity=IdentityStoreOptions(shared_url="s3://other/memo"),
    )
    assert mine.identity_store().shared_url == "s3://other/memo/"


def test_environment_is_read_by_from_env_only(default_dir, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("JAXBLEND_IDENTITY_CACHE", str(tmp_path / "mine"))
    assert identity_memo._store(IdentityStoreOptions(), remote_dataset=True) != tmp_path / "mine"
    from_env = IdentityStoreOptions.from_env()
    assert identity_memo._store(from_env, remote_dataset=True) == tmp_path / "mine"
    monkeypatch.setenv("JAXBLEND_IDENTITY_CACHE", "off")
    off = IdentityStoreOptions.from_env()
    assert identity_memo._store(off, remote_dataset=True) is None
    assert identity_memo.lookup("gs://b/d", b"1", b"2", options=off, object_store=STORE) is None


def test_round_trip_and_bad_entries_are_misses(default_dir) -> None:
    kw = {"options": IdentityStoreOptions.from_env(), "object_store": STORE}
    identity_memo.record("/data/d", b"i1", b"b1", IDENTITY, **kw)
    assert identity_memo.lookup("/data/d", b"i1", b"b1", **kw) == IDENTITY
    assert identity_memo.lookup("/data/d", b"i1", b"b2", **kw) is None  # another version
    assert identity_memo.lookup("/data/other", b"i1", b"b1", **kw) is None
    for entry in default_dir.iterdir():
        entry.write_text('{"url": "/data/d", "fingerprint": 3}')
    assert identity_memo.lookup("/data/d", b"i1", b"b1", **kw) is None


def test_local_version_changes_with_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    before, _ = identity_memo.local_version(str(path))
    import time

    time.sleep(0.05)
    path.write_bytes(b"abd")
    after, changed_at = identity_memo.local_version(str(path))
    assert after != before and changed_at > 0

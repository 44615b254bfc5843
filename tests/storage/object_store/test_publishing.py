"""The one publish protocol (payload, then the commit marker last) and waiting for it."""

from __future__ import annotations

import itertools

import pytest

from jaxblend.access import ObjectStoreOptions
from jaxblend.storage.object_store import ObjectDirectory, publish, wait_for_publication

_names = itertools.count()


@pytest.fixture
def directory() -> ObjectDirectory:
    return ObjectDirectory(f"memory://publish{next(_names)}/", ObjectStoreOptions())


def test_payload_stages_then_marker_last(directory, tmp_path, monkeypatch) -> None:
    local = tmp_path / "big.bin"
    local.write_bytes(b"from a file")
    order = []
    start_write = ObjectDirectory.start_write
    write = ObjectDirectory.write

    def logged_start_write(self, key, data):
        order.append(key)
        return start_write(self, key, data)

    def logged_write(self, key, data, what="writing it"):
        order.append(key if data is not None else f"-{key}")
        return write(self, key, data, what)

    monkeypatch.setattr(ObjectDirectory, "start_write", logged_start_write)
    monkeypatch.setattr(ObjectDirectory, "write", logged_write)
    written = publish(
        directory, [[("a", b"1"), ("b", str(local))], [("c", b"3")]], ("DONE", b"ok"),
        retract=["DONE", "c"], in_flight=1,
    )
    assert order == ["-DONE", "-c", "a", "b", "c", "DONE"]
    assert set(written) == {"a", "b", "c", "DONE"}
    assert directory.read("b") == b"from a file" and directory.read("DONE") == b"ok"


def test_a_failed_payload_leaves_no_marker(directory, tmp_path) -> None:
    directory.write("DONE", b"old")
    with pytest.raises(OSError):
        publish(directory, [[("a", b"1")], [("b", str(tmp_path / "missing"))]], ("DONE", b"new"),
                retract=["DONE"])
    assert directory.read("a") == b"1"
    assert directory.read("DONE") is None  # the stale marker is gone, the new one not written


def test_wait_for_publication_returns_what_appears() -> None:
    looks = iter([None, None, b"record"])
    assert wait_for_publication(lambda: next(looks), "gs://b/r.json", 5.0, 0.01, "x") == b"record"


def test_wait_for_publication_times_out_naming_the_url() -> None:
    with pytest.raises(TimeoutError) as info:
        wait_for_publication(lambda: None, "record gs://b/r.json", 0.05, 0.01, "check the builder")
    assert str(info.value) == (
        "record gs://b/r.json: not published within 0.05 s (--data_cache_wait); check the builder"
    )

"""`ObjectDirectory`: whole, ranged and conditional reads, writes and deletes, on every store."""

from __future__ import annotations

import itertools

import pytest

from jaxblend.access import ObjectStoreOptions
from jaxblend.storage.object_store import ObjectDirectory

_names = itertools.count()


@pytest.fixture(params=["memory", "gcs", "s3"])
def directory(request):
    if request.param == "memory":
        yield ObjectDirectory(f"memory://dir{next(_names)}", ObjectStoreOptions())
        return
    server = request.getfixturevalue(f"{request.param}_server")
    with server.pointed_at():
        yield ObjectDirectory(server.prefix_url(f"dir{next(_names)}/"), ObjectStoreOptions.from_env())


def test_write_read_and_delete(directory) -> None:
    assert directory.url.endswith("/") and directory.url_of("a") == directory.url + "a"
    assert directory.read("a") is None and not directory.exists("a")
    assert directory.write("a", b"0123456789")  # the generation written
    assert directory.read("a") == b"0123456789" and directory.exists("a")
    generation = bytes(directory.read_result("a").stamp.generation)
    assert bytes(directory.read_result("a", slice(2, 5)).value) == b"234"
    unchanged = directory.read_result("a", if_not_equal=generation)
    if not directory.url.startswith("gs://"):  # fake-gcs-server ignores ifGenerationNotMatch
        assert unchanged.state == "unspecified"  # still that generation: nothing transferred
    directory.write("a", None)
    assert directory.read("a") is None


def test_an_empty_object_exists(directory) -> None:
    directory.write("empty", b"")
    assert directory.exists("empty") and directory.read("empty") == b""

"""Session fixtures: one fake-gcs-server and one moto S3 server for the whole test run.

`object_store` is parametrized over both servers; tests that use it run once against each.
The identity memo of bucket objects goes to a per-session temporary directory.
"""

from __future__ import annotations

import os

import pytest
from helpers_object_store import GcsServer, S3Server


@pytest.fixture(scope="session", autouse=True)
def _identity_memo(tmp_path_factory: pytest.TempPathFactory):
    saved = os.environ.get("JAXBLEND_IDENTITY_CACHE")
    os.environ["JAXBLEND_IDENTITY_CACHE"] = str(tmp_path_factory.mktemp("identity-memo"))
    yield
    if saved is None:
        os.environ.pop("JAXBLEND_IDENTITY_CACHE", None)
    else:
        os.environ["JAXBLEND_IDENTITY_CACHE"] = saved


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory):
    server = GcsServer.start(tmp_path_factory.mktemp("gcs"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    server = S3Server.start(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture(params=["gcs", "s3"])
def object_store(request: pytest.FixtureRequest):
    """A running server (either kind), with this process's environment pointed at it."""
    server = request.getfixturevalue(f"{request.param}_server")
    with server.pointed_at():
        yield server

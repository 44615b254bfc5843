"""Bucket errors are one line naming the URL and the fix, against the real local servers.

A denied request names the URL and how credentials are found; an unreachable server names the
endpoint, the URL and `--s3_endpoint`, within the retry budget of the options; a missing bucket is
one line naming it. With credentials in the environment, opening an S3 store logs nothing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from helpers_fault_proxy import FaultProxy

from jaxblend.access import DataAccess, ObjectStoreOptions
from jaxblend.storage import IndexedDataset, IndexFormatError
from jaxblend.storage.object_store import ObjectDirectory, ObjectStoreError, describe

FAST = {"max_retries": 1, "initial_retry_delay": 0.05, "max_retry_delay": 0.1, "request_timeout": 20.0}


def _access(**options) -> DataAccess:
    return DataAccess.from_env(object_store=ObjectStoreOptions.from_env(**options))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _open_error(url: str, **options) -> str:
    with pytest.raises(ObjectStoreError) as info:
        IndexedDataset(url, access=_access(**options))[:]
    message = str(info.value)
    assert "\n" not in message
    return message


def test_s3_without_credentials_names_the_url_and_the_aws_variables(
    s3_server, corpus, monkeypatch
) -> None:
    url = s3_server.upload(corpus.prefix, "denied/corpus")
    for name, value in s3_server.environ().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    message = _open_error(url, **FAST)
    assert message.startswith(url + ".idx: access denied while ")
    assert "(HTTP 403)" in message
    assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile" in message


@pytest.mark.parametrize("status", [401, 403])
def test_gcs_denied_names_the_url_and_gcloud_login(gcs_server, corpus, status) -> None:
    url = gcs_server.upload(corpus.prefix, f"denied{status}/corpus")
    with FaultProxy(gcs_server.url) as proxy, gcs_server.pointed_at(proxy.url):
        proxy.fail_next(1000, status)
        message = _open_error(url, **FAST)
    assert message.startswith(url + ".idx: access denied while ")
    assert "gcloud auth application-default login" in message


def test_unreachable_s3_endpoint_names_it_the_url_and_the_flag(monkeypatch) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("JAXBLEND_S3_ENDPOINT", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    url = "s3://jaxblend-test/nowhere/corpus"
    began = time.monotonic()
    message = _open_error(url, **FAST)
    assert time.monotonic() - began < 10  # one retry, not the default six
    assert message.startswith(url + ".idx: cannot reach the server ")
    assert endpoint.removeprefix("http://") in message
    assert "--s3_endpoint" in message


def test_unreachable_endpoint_is_bounded_by_the_retry_options(monkeypatch) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    options = ObjectStoreOptions(s3_endpoint=endpoint, **FAST)
    directory = ObjectDirectory("s3://jaxblend-test/nowhere/", options)
    began = time.monotonic()
    with pytest.raises(ObjectStoreError) as info:
        directory.read("record.json")
    assert time.monotonic() - began < 10
    assert str(info.value).startswith(
        f"s3://jaxblend-test/nowhere/record.json: cannot reach the server {endpoint} while "
    )
    assert "--s3_endpoint" in str(info.value)


def test_unreachable_gcs_endpoint_names_it(gcs_server, monkeypatch) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    for name, value in gcs_server.environ(endpoint).items():
        monkeypatch.setenv(name, value)
    url = "gs://jaxblend-test/nowhere/corpus"
    message = _open_error(url, **FAST)
    assert message.startswith(url + ".idx: cannot reach the server ")
    assert endpoint.removeprefix("http://") in message and "TENSORSTORE_GCS_HTTP_URL" in message


def test_missing_bucket_is_one_line_naming_it(object_store) -> None:
    options = ObjectStoreOptions.from_env(**FAST)
    url = object_store.prefix_url("d/", "no-such-bucket-jb")
    bucket = f"{object_store.scheme}://no-such-bucket-jb"
    with pytest.raises(ObjectStoreError) as info:
        ObjectDirectory(url, options).write("k", b"x")
    assert str(info.value) == (
        f"{url}k: the bucket {bucket} does not exist; create it, or check the URL"
    )
    with pytest.raises(IndexFormatError) as info:
        IndexedDataset(url + "corpus", access=_access(**FAST))
    assert str(info.value).startswith(f"{url}corpus.idx: index file does not exist")
    assert "\n" not in str(info.value)


def test_s3_with_credentials_in_the_environment_logs_nothing(s3_server, capfd, monkeypatch) -> None:
    for name, value in s3_server.environ().items():
        monkeypatch.setenv(name, value)
    options = ObjectStoreOptions.from_env(max_retries=3)  # a context of its own: a new client
    capfd.readouterr()
    assert ObjectDirectory("s3://jaxblend-test/quiet/", options).read("absent") is None
    err = capfd.readouterr().err
    assert "aws" not in err.lower() and "Failed to open file" not in err, err


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            "PERMISSION_DENIED: Unknown [x-amzn-requestid='r'] [http_response_code='403']",
            ("s3://b/d/x: access denied while reading it (HTTP 403); S3 credentials come from "
            "AWS_ACCESS_KEY_ID"),
        ),
        (
            ("ABORTED: All 6 retry attempts failed: CURL error Could not connect to server: Failed "
            "to connect to 10.1.2.3 port 9000 after 0 ms: Could not connect to server "
            "[curl_code='7']"),
            ("s3://b/d/x: cannot reach the server 10.1.2.3:9000 while reading it after 6 attempts; "
            "start the server, or name the right one with --s3_endpoint"),
        ),
        (
            ("NOT_FOUND: NoSuchBucket: The specified bucket does not exist "
            "[http_response_code='404'] [http_response_body='<Error/>']"),
            "s3://b/d/x: the bucket s3://b does not exist; create it, or check the URL",
        ),
        (
            ("ABORTED: All 1 retry attempts failed: CURL error Could not resolve hostname: Could "
            "not resolve host: storage.googleapis.com [curl_code='6']"),
            ("s3://b/d/x: cannot reach the server storage.googleapis.com while reading it after 1 "
            "attempt;"),
        ),
        (
            "ABORTED: All 2 retry attempts failed: CURL error Connection refused [curl_code='7']",
            ("s3://b/d/x: cannot reach the store's server while reading it after 2 attempts; "
            "start the server, or name the right one with --s3_endpoint"),
        ),
        (
            "UNAVAILABLE: server said no [http_response_code='503'] [http_response_body='x\ny']",
            "s3://b/d/x: reading it failed: UNAVAILABLE: server said no [http_response_code='503']",
        ),
    ],
)
def test_describe(status: str, expected: str) -> None:
    assert describe(status, "s3://b/d/x", "reading it").startswith(expected)


def _without_credentials(s3_server, monkeypatch) -> None:
    s3_server.write("chain/k", b"x")  # an object an anonymous reader may not read
    for name, value in s3_server.environ().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("TENSORSTORE_VERBOSE_LOGGING", raising=False)


def test_credential_chain_chatter_is_hidden(s3_server, capfd, monkeypatch) -> None:
    _without_credentials(s3_server, monkeypatch)
    options = ObjectStoreOptions.from_env(request_concurrency=17, **FAST)  # a new context
    capfd.readouterr()
    with pytest.raises(ObjectStoreError, match="access denied"):
        ObjectDirectory("s3://jaxblend-test/chain/", options).read("k")
    err = capfd.readouterr().err
    assert "Failed to open file" not in err and "credentials provider" not in err, err


def test_credential_chain_chatter_is_shown_when_asked(s3_server, capfd, monkeypatch) -> None:
    from jaxblend.storage.object_store import show_sdk_logging

    _without_credentials(s3_server, monkeypatch)
    options = ObjectStoreOptions.from_env(request_concurrency=18, **FAST)
    show_sdk_logging(True)
    try:
        capfd.readouterr()
        with pytest.raises(ObjectStoreError, match="access denied"):
            ObjectDirectory("s3://jaxblend-test/chain/", options).read("k")
        err = capfd.readouterr().err
    finally:
        show_sdk_logging(False)
    assert "credentials provider" in err or "Failed to open file" in err, err


def test_a_tool_without_s3_credentials_prints_one_line_and_no_sdk_chatter(
    s3_server, corpus
) -> None:
    """The process boundary is the point: the SDK writes to file descriptor 2 of the tool."""
    url = s3_server.upload(corpus.prefix, "tool/corpus")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "JAXBLEND_S3"))}
    env["AWS_REGION"] = "us-east-1"
    run = subprocess.run(
        [sys.executable, "-m", "jaxblend.tools.inspect", "preflight", f"--data_path={url}",
         f"--s3_endpoint={s3_server.url}", "--seq_length=8", "--global_batch_size=2",
         "--train_iters=1", "--vocab_size=300", "--storage_retries=1"],
        check=False, env=env, capture_output=True, text=True, timeout=120,
    )
    output = run.stdout + run.stderr
    assert run.returncode != 0
    assert f"{url}.idx: access denied while " in output and "AWS_ACCESS_KEY_ID" in output
    assert "AuthCredentialsProvider" not in output and "Failed to open file" not in output, output


def test_the_map_store_bucket_is_bounded_by_the_retry_options(monkeypatch) -> None:
    from jaxblend.map_store.bucket import Bucket

    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    began = time.monotonic()
    with pytest.raises(ObjectStoreError) as info:
        Bucket("s3://jaxblend-test/maps", ObjectStoreOptions(s3_endpoint=endpoint, **FAST)).committed("k")
    assert time.monotonic() - began < 10
    assert str(info.value).startswith(
        f"s3://jaxblend-test/maps/k/COMMITTED: cannot reach the server {endpoint} while "
    )

"""Object-store failures as one line that names the URL and what to do.

TensorStore reports a failed request as a `ValueError` whose text is a status
(`PERMISSION_DENIED: ... [http_response_code='403']`, `ABORTED: All 6 retry attempts failed: CURL
error Could not connect to server ...`, `NOT_FOUND: NoSuchBucket ...`), naming neither the object nor
the setting to change. `describe` turns such a status into the message of an `ObjectStoreError`:

* denied (401/403, or no credentials could be found): the URL and where credentials come from
  (S3: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` or a profile; GCS: application default
  credentials, `gcloud auth application-default login`);
* unreachable server: the endpoint, the URL and the setting that names the server
  (`--s3_endpoint` / `$JAXBLEND_S3_ENDPOINT`; `$TENSORSTORE_GCS_HTTP_URL` for a GCS emulator);
* a missing bucket: the bucket and the URL;
* anything else: the URL, what was being done and the status's first line.

Standard library only: importing this module does not load TensorStore.
"""

from __future__ import annotations

import re

_HTTP_CODE = re.compile(r"http_response_code='?(\d{3})")
_CONNECT = re.compile(r"Failed to connect to (\S+) port (\d+)")
_RESOLVE = re.compile(r"(?:Could not|Couldn't) resolve host: '?([^\s'\[]+)")
_RETRIES = re.compile(r"All (\d+) retry attempts failed")
_UNREACHABLE = (
    "Could not connect to server",
    "Couldn't connect to server",
    "Could not resolve host",
    "Couldn't resolve host",
    "Connection refused",
    "Connection timed out",
    "Timeout was reached",
)


class ObjectStoreError(OSError):
    """A request to an object store failed, timed out, or named something that is not there."""


def short(text: str) -> str:
    """First line of a TensorStore status, without the echoed response body."""
    text = text.split("\n", 1)[0]
    return text.split(" [http_response_body", 1)[0][:300]


# Per URL scheme: how its store finds credentials, and what to set.
_CREDENTIALS_HINTS = {
    "gs": (
        "GCS credentials are the application default credentials: run `gcloud auth "
        "application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a key file), and "
        "check that the account may use this bucket"
    ),
    "s3": (
        "S3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile "
        "(AWS_PROFILE, ~/.aws/credentials); set them (a local S3 server accepts any pair, e.g. "
        "AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test) and check that they grant access"
    ),
}
# Per URL scheme: the setting that names its server.
_ENDPOINT_HINTS = {
    "s3": "start the server, or name the right one with --s3_endpoint (or $JAXBLEND_S3_ENDPOINT)",
    "gs": "check the network, or the emulator named by $TENSORSTORE_GCS_HTTP_URL",
}


def credentials_hint(url: str) -> str:
    """How the store of `url` finds credentials, and what to set."""
    scheme = url.partition("://")[0].lower()
    return _CREDENTIALS_HINTS.get(scheme, "check the credentials of this store")


def endpoint_hint(url: str) -> str:
    """The setting that names the server of `url`."""
    return _ENDPOINT_HINTS.get(url.partition("://")[0].lower(), "check that the server runs")


def describe(
    status: str, url: str, what: str, s3_endpoint: str | None = None, writing: bool = False
) -> str:
    """The one-line message of a failed request.

    Args:
      status: TensorStore's error text.
      url: the object (or directory) the request was about.
      what: what was being done ("reading the index file").
      s3_endpoint: the server of an s3:// `url`, when known (else the server is taken from the
        status when it names one).
      writing: the request was a write (a write finds nothing missing but the bucket).

    Returns:
      `<url>: <what happened>; <what to do>`.
    """
    code = _HTTP_CODE.search(status)
    http = code.group(1) if code else None
    if (
        http in ("401", "403")
        or status.startswith(("PERMISSION_DENIED", "UNAUTHENTICATED"))
        or "Failed to get credentials" in status
        or ("credentials" in status.lower() and status.startswith("INTERNAL"))
    ):
        reason = f"HTTP {http}" if http else short(status)
        return f"{url}: access denied while {what} ({reason}); {credentials_hint(url)}"
    if any(marker in status for marker in _UNREACHABLE):
        endpoint = s3_endpoint if url.lower().startswith("s3://") else None
        server = endpoint or _server_in(status)
        named = f"the server {server}" if server else "the store's server"
        retries = _RETRIES.search(status)
        count = int(retries.group(1)) if retries else 0
        tried = f" after {count} attempt{'s' if count != 1 else ''}" if retries else ""
        return f"{url}: cannot reach {named} while {what}{tried}; {endpoint_hint(url)}"
    if (
        "NoSuchBucket" in status
        or "bucket does not exist" in status.lower()
        or (writing and status.startswith("NOT_FOUND"))
    ):
        return f"{url}: the bucket {bucket_of(url)} does not exist; create it, or check the URL"
    return f"{url}: {what} failed: {short(status)}"


def bucket_of(url: str) -> str:
    """`scheme://bucket` of a bucket URL (the URL itself otherwise)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _server_in(status: str) -> str | None:
    m = _CONNECT.search(status)
    if m:
        return f"{m.group(1)}:{m.group(2)}"
    m = _RESOLVE.search(status)
    return m.group(1) if m else None

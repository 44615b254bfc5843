"""How jaxblend talks to object stores (gs://, s3://): endpoints, concurrency, retries, timeouts.

`ObjectStoreOptions` is the one place these settings live. It is part of the `DataAccess` passed
to every function that opens data (`jaxblend.access`), every CLI fills one from its flags
(`jaxblend.flags`), and it travels with a pickled `IndexedDataset` into Grain worker processes.
Nothing here keeps options in module state, and only `from_env()` reads the environment.

S3-compatible stores. An `s3://bucket/key` URL names no server, so the endpoint is the
`s3_endpoint` option (`--s3_endpoint`); `from_env()` fills it from `JAXBLEND_S3_ENDPOINT`, else the
AWS SDKs' standard `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`. With none, TensorStore talks to AWS.
The region is `s3_region` (`from_env()`: `AWS_REGION` or `AWS_DEFAULT_REGION`; with a custom
endpoint and no region, "us-east-1", which MinIO, R2, Ceph and moto accept). Credentials follow the AWS
chain TensorStore implements (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, profiles, metadata).

Google Cloud Storage uses application default credentials; `TENSORSTORE_GCS_HTTP_URL` points
the `gcs` driver at another server (a local emulator in the tests).

Failures. Requests that fail with a retryable status (429, 5xx) are retried by TensorStore with
exponential backoff (`max_retries`, `initial_retry_delay`, `max_retry_delay`); every wait for a
result is bounded by `request_timeout`, after which the read fails with `ObjectStoreError`
naming the URL instead of hanging.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

from jaxblend.validation import require_int

ENDPOINT_ENV = "JAXBLEND_S3_ENDPOINT"
_AWS_ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_AWS_REGION_ENVS = ("AWS_REGION", "AWS_DEFAULT_REGION")
_DEFAULT_CUSTOM_REGION = "us-east-1"


class ObjectStoreError(OSError):
    """A request to an object store failed, timed out, or named something that is not there."""


@dataclasses.dataclass(frozen=True)
class ObjectStoreOptions:
    """Settings for reads from gs:// and s3:// (and TensorStore's other remote kvstores).

    Attributes:
      s3_endpoint: URL of an S3-compatible server (None: AWS).
      s3_region: S3 region (None: "us-east-1" with a custom endpoint, else TensorStore's default).
      request_concurrency: requests in flight at once per process (GCS and S3 each).
      max_retries: retries of a request that failed with a retryable status (429, 5xx).
      initial_retry_delay: seconds before the first retry (doubling up to `max_retry_delay`).
      max_retry_delay: longest wait between retries, seconds.
      request_timeout: longest wait for any one batch of reads, seconds (including retries).
      coalesce_gap: byte ranges of one file closer than this many bytes are read as one request.
    """

    s3_endpoint: str | None = None
    s3_region: str | None = None
    request_concurrency: int = 256
    max_retries: int = 6
    initial_retry_delay: float = 0.2
    max_retry_delay: float = 4.0
    request_timeout: float = 120.0
    coalesce_gap: int = 4096

    def __post_init__(self):
        for name in ("request_concurrency", "max_retries", "coalesce_gap"):
            value = getattr(self, name)
            low = 1 if name == "request_concurrency" else 0
            require_int(f"ObjectStoreOptions.{name}", value, low)
        for name in ("initial_retry_delay", "max_retry_delay", "request_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"ObjectStoreOptions.{name} must be a number > 0, got {value!r}")
        if self.s3_endpoint is not None and "://" not in self.s3_endpoint:
            raise ValueError(
                f"s3_endpoint must be a URL such as http://127.0.0.1:9000, got {self.s3_endpoint!r}"
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> ObjectStoreOptions:
        """Options from the environment (endpoint, region), with explicit `overrides` on top."""
        values: dict[str, Any] = {}
        endpoint = _first_env((ENDPOINT_ENV, *_AWS_ENDPOINT_ENVS))
        if endpoint:
            values["s3_endpoint"] = endpoint
        region = _first_env(_AWS_REGION_ENVS)
        if region:
            values["s3_region"] = region
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def complete_spec(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Fills an s3 kvstore spec's endpoint and region from these options (copy; other drivers
        as they are). The environment is not consulted (see `from_env`)."""
        if spec.get("driver") != "s3":
            return spec
        spec = copy.deepcopy(spec)
        if self.s3_endpoint and "endpoint" not in spec:
            spec["endpoint"] = self.s3_endpoint
        if "aws_region" not in spec:
            region = self.s3_region or (_DEFAULT_CUSTOM_REGION if "endpoint" in spec else None)
            if region:
                spec["aws_region"] = region
        return spec

    def context_spec(self) -> dict[str, Any]:
        """TensorStore context resources for these options."""
        retries = {
            "max_retries": self.max_retries,
            "initial_delay": f"{self.initial_retry_delay}s",
            "max_delay": f"{self.max_retry_delay}s",
        }
        limit = {"limit": self.request_concurrency}
        return {
            "gcs_request_concurrency": limit,
            "s3_request_concurrency": limit,
            "gcs_request_retries": retries,
            "s3_request_retries": retries,
        }


def _first_env(names: tuple[str, ...]) -> str | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None

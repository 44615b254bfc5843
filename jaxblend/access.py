"""`DataAccess`: everything that says *where and how* data is reached, in one passed object.

What the data *is* (blend, split, sequence length, seed, sample counts) is a `GPTDataConfig`;
how it is reached is a `DataAccess`: object-store options (endpoint, region, concurrency,
retries, timeout), where index maps are cached and how processes share that cache, where
dataset identities are remembered, and which storage backend reads tokens. It is frozen,
validated and picklable: it is built once (from flags by `jaxblend.cli`, or in Python), passed
explicitly to every function that opens data, and travels with pickled sources into Grain
worker processes, so a worker reaches the data exactly as its parent did. Nothing in the package
keeps these settings in module state.

The environment is read once, by `DataAccess.from_env()`, never at the point of use.

Where does a new option belong? If changing it can change the bytes of a batch, it belongs to the
data configuration (and its fingerprint); if it only changes where or how fast the same bytes are
reached, it belongs here (and never enters a fingerprint).

Object stores (`ObjectStoreOptions`: endpoint and region from the environment, retries,
timeouts): README, "Data in a bucket", and docs/object_stores.md.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

from jaxblend.urls import is_url, local_path
from jaxblend.validation import require_choice, require_int, require_positive

ENDPOINT_ENV = "JAXBLEND_S3_ENDPOINT"
_AWS_ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_AWS_REGION_ENVS = ("AWS_REGION", "AWS_DEFAULT_REGION")
_DEFAULT_CUSTOM_REGION = "us-east-1"
IDENTITY_ENV = "JAXBLEND_IDENTITY_CACHE"
MIRROR_ENV = "JAXBLEND_INDEX_MIRROR"
BACKENDS = ("auto", "mmap", "tensorstore")
VERIFY_LEVELS = ("summary", "full")


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
        for name, low in (("request_concurrency", 1), ("max_retries", 0), ("coalesce_gap", 0)):
            require_int(f"ObjectStoreOptions.{name}", getattr(self, name), low)
        for name in ("initial_retry_delay", "max_retry_delay", "request_timeout"):
            require_positive(f"ObjectStoreOptions.{name}", getattr(self, name))
        if self.s3_endpoint is not None and "://" not in self.s3_endpoint:
            raise ValueError(
                f"s3_endpoint must be a URL such as http://127.0.0.1:9000, got {self.s3_endpoint!r}"
            )

    @classmethod
    def from_env(cls, **overrides: Any) -> ObjectStoreOptions:
        """Options from the environment, with explicit `overrides` on top: the endpoint from
        `$JAXBLEND_S3_ENDPOINT`, else the AWS SDKs' `$AWS_ENDPOINT_URL_S3` / `$AWS_ENDPOINT_URL`;
        the region from `$AWS_REGION` or `$AWS_DEFAULT_REGION`."""
        values = {
            "s3_endpoint": _first_env((ENDPOINT_ENV, *_AWS_ENDPOINT_ENVS)),
            "s3_region": _first_env(_AWS_REGION_ENVS),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**{k: v for k, v in values.items() if v is not None})

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


@dataclasses.dataclass(frozen=True)
class MapStoreOptions:
    """Where index maps (GPT and BERT/T5) are cached, and how processes share the cache.

    Attributes:
      location: a local directory, a bucket URL (`gs://b/maps`, `s3://...`) shared by every host,
        or None to build maps in memory without caching.
      mirror: local directory holding maps downloaded from a bucket `location` (None: a directory
        under the system's temporary directory).
      wait_seconds: longest wait for the building process to publish maps to a bucket before
        failing with an error naming the entry.
      poll_seconds: time between looks for a published entry.
      builder: whether this process builds and publishes missing entries (None: JAX process 0).
      verify: how a cached entry is checked before use: "summary" (every start) or "full" (every
        byte against its SHA-256).
      read_megatron_cache: also reuse Megatron-Core's own index-map cache files found in a local
        `location`.
    """

    location: str | None = None
    mirror: str | None = None
    wait_seconds: float = 900.0
    poll_seconds: float = 1.0
    builder: bool | None = None
    verify: str = "summary"
    read_megatron_cache: bool = True

    def __post_init__(self) -> None:
        if self.location is not None:
            if not isinstance(self.location, (str, os.PathLike)) or not str(self.location):
                raise ValueError(
                    f"MapStoreOptions.location must be a directory or URL, got {self.location!r}"
                )
            object.__setattr__(self, "location", os.fspath(self.location))
        if self.mirror is not None:
            object.__setattr__(self, "mirror", os.fspath(self.mirror))
        require_positive("MapStoreOptions.wait_seconds", self.wait_seconds)
        require_positive("MapStoreOptions.poll_seconds", self.poll_seconds)
        if self.builder is not None and not isinstance(self.builder, bool):
            raise ValueError(f"MapStoreOptions.builder must be None or a bool, got {self.builder!r}")
        require_choice("MapStoreOptions.verify", self.verify, VERIFY_LEVELS)


@dataclasses.dataclass(frozen=True)
class IdentityStoreOptions:
    """Where the content fingerprints of dataset versions are remembered (a cache: a lost entry
    costs one re-hash of that dataset, never a wrong answer).

    Attributes:
      enabled: False hashes every dataset at every open.
      local_dir: directory for entries of local datasets, and of bucket datasets without a
        `shared_url` (None: `~/.cache/jaxblend/identity`; `from_env` honours `$XDG_CACHE_HOME`).
      shared_url: bucket URL for entries of bucket datasets, shared by every host of a pod (None:
        `<map location>/identity/` when the map store is a bucket, else `local_dir`).
    """

    enabled: bool = True
    local_dir: str | None = None
    shared_url: str | None = None

    def __post_init__(self) -> None:
        if self.local_dir is not None:
            object.__setattr__(self, "local_dir", os.fspath(self.local_dir))
        if self.shared_url is not None:
            if not is_url(self.shared_url):
                raise ValueError(
                    f"IdentityStoreOptions.shared_url must be a bucket URL, got {self.shared_url!r}"
                )
            object.__setattr__(self, "shared_url", self.shared_url.rstrip("/") + "/")

    @classmethod
    def from_env(cls) -> IdentityStoreOptions:
        """From `$JAXBLEND_IDENTITY_CACHE`: unset = defaults, "" or "off" = disabled, a bucket URL
        = `shared_url`, anything else = `local_dir`. A `local_dir` left unset is
        `$XDG_CACHE_HOME/jaxblend/identity` when `$XDG_CACHE_HOME` is set."""
        value = os.environ.get(IDENTITY_ENV)
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        default_dir = os.path.join(xdg, "jaxblend", "identity") if xdg else None
        if value is None:
            return cls(local_dir=default_dir)
        value = value.strip()
        if value in ("", "off"):
            return cls(enabled=False)
        if is_url(value):
            return cls(local_dir=default_dir, shared_url=value)
        return cls(local_dir=local_path(value))


@dataclasses.dataclass(frozen=True)
class DataAccess:
    """Where and how data is reached: storage, map cache, identity memo, backend.

    Attributes:
      object_store: endpoints, retries, concurrency and timeouts of gs:// and s3:// reads.
      maps: where index maps are cached and how processes share them.
      identity: where dataset identities (content fingerprints by file version) are remembered.
      backend: how `.bin` tokens are read: "auto" (memory maps for local files, TensorStore for
        URLs), "mmap" (local only) or "tensorstore".
    """

    object_store: ObjectStoreOptions = dataclasses.field(default_factory=ObjectStoreOptions)
    maps: MapStoreOptions = dataclasses.field(default_factory=MapStoreOptions)
    identity: IdentityStoreOptions = dataclasses.field(default_factory=IdentityStoreOptions)
    backend: str = "auto"

    def __post_init__(self) -> None:
        for name, cls in (
            ("object_store", ObjectStoreOptions),
            ("maps", MapStoreOptions),
            ("identity", IdentityStoreOptions),
        ):
            if not isinstance(getattr(self, name), cls):
                raise TypeError(
                    f"DataAccess.{name} must be a {cls.__name__}, got {getattr(self, name)!r}"
                )
        require_choice("DataAccess.backend", self.backend, BACKENDS)

    @classmethod
    def from_env(cls, **overrides: Any) -> DataAccess:
        """Defaults completed from the environment (S3 endpoint and region, the identity memo's
        and the map mirror's directories), with explicit `overrides` on top."""
        values: dict[str, Any] = {
            "object_store": ObjectStoreOptions.from_env(),
            "identity": IdentityStoreOptions.from_env(),
            "maps": MapStoreOptions(mirror=_first_env((MIRROR_ENV,))),
        }
        return cls(**(values | overrides))

    def identity_store(self) -> IdentityStoreOptions:
        """The identity memo's options with `shared_url` resolved: the given one, else
        `<maps.location>/identity/` when the map store is a bucket (so a pod that shares its index
        maps also shares its dataset identities), else None (entries stay in `local_dir`)."""
        if self.identity.shared_url is not None or not is_url(self.maps.location):
            return self.identity
        shared = f"{self.maps.location.rstrip('/')}/identity/"
        return dataclasses.replace(self.identity, shared_url=shared)

    def with_maps(self, **changes: Any) -> DataAccess:
        """A copy with some map-store options changed."""
        return dataclasses.replace(self, maps=dataclasses.replace(self.maps, **changes))


def _first_env(names: tuple[str, ...]) -> str | None:
    return next((v for name in names if (v := os.environ.get(name, "").strip())), None)

"""absl flags for reaching gs:// and s3:// (`jaxblend.access.ObjectStoreOptions`), shared by CLIs.

`define_object_store_flags()` defines --s3_endpoint, --s3_region, --storage_concurrency,
--storage_retries and --storage_timeout (the data flags include it; the preprocessing CLI calls
it directly); `object_store_from_flags()` turns them, over the environment's endpoint and region
(`ObjectStoreOptions.from_env`), into the options.
"""

from __future__ import annotations

from absl import flags

from jaxblend import access


def define_object_store_flags() -> None:
    """Defines the object-store flags (once per program)."""
    flags.DEFINE_string(
        "s3_endpoint", None,
        f"S3-compatible server for s3:// URLs (MinIO, R2, Ceph, a local server); default: "
        f"${access.ENDPOINT_ENV}, then $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL, else AWS.",
    )
    flags.DEFINE_string("s3_region", None, "S3 region (default: $AWS_REGION).")
    defaults = access.ObjectStoreOptions()
    flags.DEFINE_integer(
        "storage_concurrency", defaults.request_concurrency,
        "Object-store requests in flight per process.", lower_bound=1,
    )
    flags.DEFINE_integer(
        "storage_retries", defaults.max_retries,
        "Retries of an object-store request that failed with 429 or 5xx (exponential backoff).",
        lower_bound=0,
    )
    flags.DEFINE_float(
        "storage_timeout", defaults.request_timeout,
        "Seconds to wait for object-store reads before failing (never hang).", lower_bound=0.001,
    )


def object_store_from_flags() -> access.ObjectStoreOptions:
    """The object-store flags, over the environment's endpoint and region.

    Raises:
      ValueError: naming the bad flag.
    """
    fl = flags.FLAGS
    try:
        return access.ObjectStoreOptions.from_env(
            s3_endpoint=fl.s3_endpoint,
            s3_region=fl.s3_region,
            request_concurrency=fl.storage_concurrency,
            max_retries=fl.storage_retries,
            request_timeout=fl.storage_timeout,
        )
    except ValueError as e:
        raise ValueError(f"object-store flags: {e}") from None

"""absl flags for reaching gs:// and s3:// (`jaxblend.access.ObjectStoreOptions`), shared by CLIs.

`define_object_store_flags()` defines --s3_endpoint, --s3_region, --storage_concurrency,
--storage_retries and --storage_timeout (the data flags include it; the preprocessing CLI calls
it directly); `object_store_options(values)` turns their values, over the environment's endpoint
and region (`ObjectStoreOptions.from_env`), into the options (`object_store_from_flags()`: of the
parsed flags).
"""

from __future__ import annotations

from absl import flags

from jaxblend import access
from jaxblend.cli import flag_help
from jaxblend.cli.flag_values import DataFlagValues, read_flag_values


def define_object_store_flags() -> None:
    """Defines the object-store flags (once per program)."""
    with flag_help.group(flag_help.STORAGE):
        flags.DEFINE_string(
            "s3_endpoint", None,
            f"S3-compatible server for s3:// URLs (MinIO, R2, Ceph, a local server); default: "
            f"${access.ENDPOINT_ENV}, then $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL, else AWS.",
        )
        flags.DEFINE_string(
            "s3_region", None,
            "S3 region (default: $AWS_REGION or $AWS_DEFAULT_REGION; else us-east-1 with "
            "--s3_endpoint, TensorStore's default without).",
        )
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


def object_store_options(values: DataFlagValues) -> access.ObjectStoreOptions:
    """The object-store flags' values, over the environment's endpoint and region.

    Raises:
      ValueError: naming the bad flag.
    """
    try:
        return access.ObjectStoreOptions.from_env(
            s3_endpoint=values.s3_endpoint,
            s3_region=values.s3_region,
            request_concurrency=values.storage_concurrency,
            max_retries=values.storage_retries,
            request_timeout=values.storage_timeout,
        )
    except ValueError as e:
        raise ValueError(f"object-store flags: {e}") from None


def object_store_from_flags() -> access.ObjectStoreOptions:
    """`object_store_options` of the parsed flags."""
    return object_store_options(read_flag_values())

"""Loader flags (Grain workers, reads in flight) and their `jaxblend.loading.PrefetchOptions`."""

from __future__ import annotations

from absl import flags

from jaxblend.cli import flag_help


def define_loader_flags() -> None:
    """Defines `--worker_count` and `--read_ahead`."""
    with flag_help.group(flag_help.PROCESSES):
        flags.DEFINE_integer(
            "worker_count", 0, "Grain worker processes (0: read in this process's threads).",
            lower_bound=0,
        )
        flags.DEFINE_integer(
            "read_ahead", 0, "Steps read concurrently ahead of use (0: 8 from a bucket, else 1).",
            lower_bound=0,
        )


def prefetch_from_flags():
    """The `jaxblend.loading.PrefetchOptions` of the flags."""
    from jaxblend.loading import PrefetchOptions

    fl = flags.FLAGS
    return PrefetchOptions(worker_count=fl.worker_count, read_ahead=fl.read_ahead)

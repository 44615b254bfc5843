"""The `jaxblend.access.DataAccess` described by the storage and cache flags.

The flags themselves are data flags (`define_data_flags`); `--storage_backend` belongs to the
source flags (`define_source_flags`) and is "auto" for programs that do not define it. The
access is assembled from the flags' values by `jaxblend.cli.assembly.data_access`.
"""

from __future__ import annotations

from jaxblend.access import DataAccess
from jaxblend.cli import assembly
from jaxblend.cli.flag_values import read_flag_values


def data_access_from_flags(default_map_location: str | None = None) -> DataAccess:
    """Where and how the data flags' data is reached (`assembly.data_access` of the flags).

    Args:
      default_map_location: the map store's location when `--data_cache_path` is not given.

    Raises:
      ValueError: one line naming the bad flag.
    """
    return assembly.data_access(read_flag_values(), default_map_location)


def prefixes_from_flags() -> list[str]:
    """Every distinct dataset prefix the data flags name, in order (needs no --seq_length).

    Raises:
      ValueError: no data path, both forms given, a malformed blend or schedule.
    """
    return assembly.prefixes(read_flag_values())

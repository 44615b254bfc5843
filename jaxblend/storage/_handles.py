"""Per-process open state of an `IndexedDataset`.

`Handles` holds what one process has open for a dataset (the parsed `.idx` header, sizes, the
`.idx` buffer and arrays, the kvstore of a remote dataset; the `.bin` is read by the token
reader, `token_reader.TokenReader`). It is created by `_local_open.open_local` or
`_remote_open.open_remote`, completed lazily by `_remote_open.load_index` for remote datasets
opened from `identity_memo`, and released by `release`. Nothing here is shared between
processes: `IndexedDataset` pickles its `DataAccess` and reopens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import mmap
from typing import Any

import tensorstore as ts

from jaxblend.storage import idx_format
from jaxblend.storage.idx_format import IndexArrays, IndexFormatError
from jaxblend.storage.object_store import location as _location


@dataclasses.dataclass
class Handles:
    """Per-process open state of a dataset."""

    header: idx_format.IndexHeader
    num_tokens: int
    bin_size: int
    kvstore: ts.KvStore | None  # remote datasets: `.idx` reads (tokens: `token_reader`)
    idx_generation: bytes = b""  # file versions seen at open (generations; local: version stamps)
    bin_generation: bytes = b""
    changed_at: float = 0.0  # local: when either file last changed (identity_memo.SETTLE_SECONDS)
    arrays: IndexArrays | None = None  # None until first needed (remote)
    idx_buffer: Any = None  # a read-only map (see _mapping) or bytes; the arrays alias it


def open_kvstore(loc: _location.Location, context: ts.Context) -> ts.KvStore:
    """Opens the kvstore holding `loc`'s files.

    Raises:
      IndexFormatError: the kvstore spec does not open.
    """
    try:
        return _location.open_kvstore(loc.kvstore, context)
    except ValueError as e:
        raise IndexFormatError(f"{loc.display}: cannot open the kvstore {loc.kvstore}: {e}") from e


def release(state: Handles) -> None:
    """Drops the arrays and closes the maps (views handed out earlier keep a map alive)."""
    state.arrays = None
    if isinstance(state.idx_buffer, mmap.mmap):
        with contextlib.suppress(BufferError):
            state.idx_buffer.close()

"""Opens a local dataset: the `.idx` memory-mapped and validated, the `.bin` sized.

The `.bin` is not opened here: the token reader (`token_reader.TokenReader`) maps it ("mmap"
backend) or opens a file kvstore ("tensorstore") on the first read.
"""

from __future__ import annotations

import os
import stat

import numpy as np

from jaxblend.access import DataAccess
from jaxblend.storage import _mapping, idx_format
from jaxblend.storage import dataset_identity as _identity
from jaxblend.storage._handles import Handles
from jaxblend.storage._prefix_hint import missing_prefix_hint
from jaxblend.storage.dataset_identity import memo as identity_memo
from jaxblend.storage.idx_format import IndexFormatError
from jaxblend.storage.object_store import location as _location


def open_local(
    loc: _location.Location, access: DataAccess, multimodal: bool | None
) -> tuple[Handles, str | None]:
    """Opens the local files of `loc` (which has a `local_prefix`); `multimodal` as
    `idx_format.parse_index`.

    Returns:
      The handles and, for a remembered version pair, its content fingerprint (else None).

    Raises:
      IndexFormatError: a file is missing, a directory, or malformed, or the pair disagrees.
    """
    idx_buffer, arrays, bin_size = read_index(loc, multimodal)
    try:
        idx_version, bin_version, changed_at = _identity.local_versions(loc.local_prefix)
    except OSError as e:
        raise IndexFormatError(f"{loc.file_name('.idx')}: cannot be stat'ed: {e}") from None
    h = Handles(
        header=idx_format.parse_header(idx_buffer, loc.file_name(".idx")),
        num_tokens=arrays.num_tokens,
        bin_size=bin_size,
        kvstore=None,
        idx_generation=idx_version,
        bin_generation=bin_version,
        changed_at=changed_at,
        arrays=arrays,
        idx_buffer=idx_buffer,
    )
    known = identity_memo.lookup(
        _identity.memo_url(loc), idx_version, bin_version,
        options=access.identity_store(), object_store=access.object_store,
    )
    if known is None or (known.num_tokens, known.bin_size) != (h.num_tokens, bin_size):
        known = None
    return h, None if known is None else known.fingerprint


def read_index(
    loc: _location.Location, multimodal: bool | None
) -> tuple[np.ndarray | bytes, idx_format.IndexArrays, int]:
    """Maps and validates the `.idx` of `loc` (which has a `local_prefix`) and checks the `.bin`'s
    size against it; `multimodal` as `idx_format.parse_index`.

    Returns:
      The `.idx` buffer (a read-only map; the arrays alias it), its arrays, the `.bin` size.

    Raises:
      IndexFormatError: a file is missing (with the likely prefix), a directory, or malformed, or
        the pair disagrees.
    """
    idx_name, bin_name = loc.file_name(".idx"), loc.file_name(".bin")
    idx_path = loc.local_prefix + ".idx"
    idx_buffer = _mapping.map_readonly(idx_path) if _size(idx_path, idx_name, loc) else b""
    arrays = idx_format.parse_index(idx_buffer, idx_name, multimodal=multimodal)
    bin_size = _size(loc.local_prefix + ".bin", bin_name)
    idx_format.check_bin_size(arrays, bin_size, idx_name, bin_name)
    return idx_buffer, arrays, bin_size


def _size(path: str, name: str, hint_for: _location.Location | None = None) -> int:
    """The size of an index (`hint_for` its dataset, for the likely prefix when it is missing) or
    data file."""
    what = "data file" if hint_for is None else "index file"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        hint = "" if hint_for is None else missing_prefix_hint(hint_for.local_prefix)
        raise IndexFormatError(f"{name}: {what} does not exist{hint}") from None
    if stat.S_ISDIR(st.st_mode):
        raise IndexFormatError(f"{name}: {what} is a directory")
    return st.st_size

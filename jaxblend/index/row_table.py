"""Row tables: each sample's token pieces as `.bin` token ranges, in sample order.

A `SplitMaps` answers "which pieces make sample i" from the whole split's maps (document, sample
and shuffle indices, the blend's indices, every dataset's sequence lengths): a host needs all of
them before it can read one batch. A row table is the same answer written out once, in sample
order, so the pieces of samples `[lo, hi)` are one contiguous range of each array and a host
reads only the rows of the steps it runs:

* `starts` int64 `[N + 1]`: the pieces of sample i are `[starts[i], starts[i + 1])`;
* `dataset` int32 `[P]`: the piece's dataset id within the split (index into
  `SplitMaps.dataset_names`);
* `offset` int64 `[P]`: the piece's first token, counted in tokens from the start of that
  dataset's `.bin`;
* `length` int32 `[P]`: tokens in the piece.

Empty pieces (a sample that starts at the very end of a document) are kept, as
`SplitMaps.spans(keep_empty=True)` gives them, so every sample has at least one piece (its dataset
id is `dataset[starts[i]]`) and inter-document masking sees the same document boundaries; readers
skip them.

A token offset is the sum of the lengths of the sequences before the piece's sequence plus the
piece's offset within it: `idx_format.validate_arrays` refuses any `.idx` whose byte pointers are
not the running sums of the sequence lengths, so the lengths the maps hold give the `.bin`
position without the `.idx` pointers.

Pure numpy + Numba; deterministic (the same split gives the same bytes).
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from jaxblend.index.split_maps import SplitMaps
from jaxblend.validation import require_choice, require_int

FIELDS = ("starts", "dataset", "offset", "length")
"""The arrays of a row table, in the order `RowTables.rows` returns them."""

DTYPES = {"starts": np.int64, "dataset": np.int32, "offset": np.int64, "length": np.int32}

BYTES_PER_PIECE = 4 + 8 + 4
"""Bytes of one piece (dataset, offset, length); a sample also costs 8 bytes of `starts`."""

DEFAULT_CHUNK = 1 << 16


def array_name(split: str, field: str) -> str:
    """Name of one row-table array of `split` in a map-store entry (`<name>.npy` on disk).

    The one naming convention shared by the publisher and the readers: split "train"'s arrays are
    `train.rows.starts`, `train.rows.dataset`, `train.rows.offset`, `train.rows.length`.

    Raises:
      ValueError: an unknown field or an empty split name.
    """
    require_choice("row-table field", field, FIELDS)
    if not split or "/" in split:
        raise ValueError(f"split name must be a non-empty name without '/', got {split!r}")
    return f"{split}.rows.{field}"


def named_arrays(split: str, table: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`table`'s arrays under their map-store names (`array_name`), ready for `entries.save`."""
    return {array_name(split, field): table[field] for field in FIELDS}


def build_row_table(split: SplitMaps, chunk: int = DEFAULT_CHUNK) -> dict[str, np.ndarray]:
    """The row table of one split (see the module docstring for the arrays).

    Samples are resolved `chunk` at a time with the split's compiled `spans` kernel, so the
    working memory beyond the result is a few arrays of one chunk's pieces.

    Args:
      split: the split's maps.
      chunk: samples resolved per kernel call (> 0).

    Returns:
      `{"starts", "dataset", "offset", "length"}` with the dtypes of `DTYPES`.

    Raises:
      ValueError: `chunk` < 1, or a dataset longer than an int64 token offset can say.
    """
    require_int("chunk", chunk, 1)
    n = len(split)
    token_starts, bases = _token_starts(split)
    starts = np.empty(n + 1, np.int64)
    starts[0] = 0
    parts: dict[str, list[np.ndarray]] = {"dataset": [], "offset": [], "length": []}
    total = 0
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        spans = split.spans(np.arange(lo, hi, dtype=np.int64), keep_empty=True)
        offset = _bin_offsets(
            np.asarray(spans.dataset, np.int64), np.asarray(spans.sequence, np.int64),
            np.asarray(spans.offset, np.int64), token_starts, bases,
        )
        counts = np.bincount(spans.row, minlength=hi - lo)
        starts[lo + 1 : hi + 1] = total + np.cumsum(counts)
        total += int(spans.row.shape[0])
        parts["dataset"].append(np.asarray(spans.dataset, np.int32))
        parts["offset"].append(offset)
        parts["length"].append(np.asarray(spans.length, np.int32))
    table = {"starts": starts}
    for field, chunks in parts.items():
        table[field] = np.concatenate(chunks) if chunks else np.zeros(0, DTYPES[field])
    return table


def _token_starts(split: SplitMaps) -> tuple[np.ndarray, np.ndarray]:
    """First token of every sequence of every prefix (the lengths' running sums, per prefix), and
    each constituent dataset's base index into it."""
    # SplitMaps keeps the sequence lengths private; this module is its sibling in the index layer.
    lengths = np.asarray(split._lengths, np.int64)
    length_offsets = np.asarray(split._length_offsets, np.int64)
    ends = np.cumsum(lengths)
    before = np.concatenate(([0], ends))[length_offsets[:-1]]  # tokens of the earlier prefixes
    token_starts = ends - lengths - np.repeat(before, np.diff(length_offsets))
    return token_starts, length_offsets[np.asarray(split._constituent_prefix, np.int64)]


@numba.njit(cache=True, nogil=True)
def _bin_offsets(dataset, sequence, offset, token_starts, bases):  # pragma: no cover - compiled
    out = np.empty(dataset.shape[0], np.int64)
    for j in range(dataset.shape[0]):
        out[j] = token_starts[bases[dataset[j]] + sequence[j]] + offset[j]
    return out


@dataclasses.dataclass(frozen=True)
class RowSpans:
    """The pieces of a batch of samples, row order then piece order (as `SplitMaps.spans`, with
    `.bin` token offsets in place of sequence ids and offsets within them).

    Attributes:
      row: int64, position of the sample in the `sample_ids` argument.
      dataset: int32, dataset id within the split.
      offset: int64, first token of the piece in the dataset's `.bin`.
      length: int64, tokens of the piece.
    """

    row: np.ndarray
    dataset: np.ndarray
    offset: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return int(self.row.shape[0])


@numba.njit(cache=True, nogil=True)
def gather_pieces(rows, starts, base, first, second, length):  # pragma: no cover
    """The pieces of rows `rows` of a table whose row q holds pieces `[starts[q], starts[q + 1])`
    (`base`: the index of the first piece the columns hold), row order then piece order:
    (position in `rows`, `first`, `second`, `length`), all int64, empty pieces included. The one
    gather of a table's pieces (here and `PackedSplitMaps.spans`)."""
    total = 0
    for r in range(rows.shape[0]):
        total += starts[rows[r] + 1] - starts[rows[r]]
    out_row = np.empty(total, np.int64)
    out_first = np.empty(total, np.int64)
    out_second = np.empty(total, np.int64)
    out_len = np.empty(total, np.int64)
    m = 0
    for r in range(rows.shape[0]):
        for p in range(starts[rows[r]] - base, starts[rows[r] + 1] - base):
            out_row[m] = r
            out_first[m] = first[p]
            out_second[m] = second[p]
            out_len[m] = length[p]
            m += 1
    return out_row, out_first, out_second, out_len


def spans_of_rows(
    lo: int,
    starts: np.ndarray,
    dataset: np.ndarray,
    offset: np.ndarray,
    length: np.ndarray,
    sample_ids: np.ndarray,
) -> RowSpans:
    """The pieces of `sample_ids` from rows `[lo, hi)` of a row table (one compiled call).

    Args:
      lo: the first sample the slices cover.
      starts: `starts[lo : hi + 1]` of the table.
      dataset, offset, length: the pieces `[starts[lo], starts[hi])` of the table.
      sample_ids: int64 sample ids in `[lo, hi)`, any order, repeats allowed.

    Returns:
      The same pieces, in the same order, as `SplitMaps.spans(sample_ids, keep_empty=True)`.

    Raises:
      IndexError: a sample id outside `[lo, hi)`.
      ValueError: the slices disagree in size, or `starts` does not increase (a corrupt table).
    """
    starts = np.ascontiguousarray(starts, np.int64)
    hi = lo + starts.shape[0] - 1
    n_pieces = int(starts[-1] - starts[0]) if starts.shape[0] else -1
    if starts.shape[0] < 1 or not dataset.shape[0] == offset.shape[0] == length.shape[0] == n_pieces:
        raise ValueError(
            f"row-table slices disagree: {starts.shape[0]} starts for {dataset.shape[0]}, "
            f"{offset.shape[0]}, {length.shape[0]} pieces"
        )
    if starts.shape[0] > 1 and int(np.diff(starts).min()) < 1:
        raise ValueError(
            f"row-table starts of rows [{lo}, {hi}) do not increase (every sample has a piece): "
            "the table is corrupt; publish the maps again"
        )
    ids = np.ascontiguousarray(sample_ids, np.int64).reshape(-1)
    if ids.size and (ids.min() < lo or ids.max() >= hi):
        bad = ids[(ids < lo) | (ids >= hi)][0]
        raise IndexError(f"sample id {int(bad)} is outside the row-table rows [{lo}, {hi})")
    row, ds, off, n = gather_pieces(ids - lo, starts, starts[0], dataset, offset, length)
    return RowSpans(row=row, dataset=ds.astype(np.int32), offset=off, length=n)

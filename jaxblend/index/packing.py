"""Whole-item packing: items of known lengths into rows of a fixed capacity, best-fit decreasing.

The packer of `--packing=best_fit` (documents of a dataset) and of any other construction that
puts whole items (conversations, ...) into fixed-length rows. Two steps, both pure (numpy + Numba,
no randomness: the caller fixes the item order, e.g. with a seeded shuffle):

* `cut_items(lengths, capacity)`: an item longer than a row is cut into `capacity`-token pieces
  (the remainder, at the item's end, is a piece of its own); every other item is one piece.
  Empty items have no piece.
* `best_fit_pack(lengths, capacity, window)`: the pieces, taken `window` at a time in the given
  order, are placed longest first (ties in the given order) each into the open row with the least
  room that still holds it, else into a new row. The rows of a window are closed when the window
  ends, so a window's rows depend only on its items. Rows are numbered in the order they were
  opened; the pieces of a row in the order they were placed.

Typical use by a source of whole items (`build_packed_epoch` is the document case)::

    order = rng.permutation(num_items)                    # the order fixed by the seed
    cut = cut_items(lengths[order], capacity)             # or truncate items to `capacity` first
    rows = best_fit_pack(cut.length, capacity, window)
    # row r holds pieces rows.pieces[rows.starts[r]:rows.starts[r + 1]]; piece q is item
    # order[cut.item[q]], tokens [cut.offset[q], cut.offset[q] + cut.length[q])

Finding the best open row is a look-up in a two-level bitmap of the rooms the open rows have left
(a few word operations), and a window is sorted by length with a counting sort, so packing costs
O(n + capacity x windows) (a merge sort for windows much smaller than a row).
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

PACKINGS = ("concat", "best_fit")
"""`GPTDataConfig.packing` values: Megatron's concatenate-and-cut samples, or packed rows."""

OVERFLOWS = ("cut", "truncate", "drop")
"""`GPTDataConfig.packing_overflow` values: what `cut_items` keeps of an item longer than a row."""

DEFAULT_WINDOW = 16384
"""Items packed together (`--packing_window`): large enough that the half-empty rows left when a
window closes cost well under 1% of the row tokens at mean items of a few hundred tokens."""


@dataclasses.dataclass(frozen=True)
class CutItems:
    """The pieces of items cut to a row capacity, in item order.

    Attributes:
      item: int64 `[P]`, the position of the piece's item in the `lengths` given.
      offset: int64 `[P]`, the piece's first token within its item.
      length: int64 `[P]`, tokens in the piece (1..capacity).
      split_items: number of items longer than a row (cut into several pieces).
    """

    item: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    split_items: int

    def __len__(self) -> int:
        return int(self.item.shape[0])


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """Rows of packed pieces.

    Attributes:
      starts: int64 `[R + 1]`; row r holds `pieces[starts[r]:starts[r + 1]]`.
      pieces: int64 `[P]`, positions in the packed `lengths`, each exactly once.
      used: int64 `[R]`, tokens of each row (at most the capacity; the rest is padding).
    """

    starts: np.ndarray
    pieces: np.ndarray
    used: np.ndarray

    def __len__(self) -> int:
        return int(self.used.shape[0])

    def padding(self, capacity: int) -> int:
        """Padding tokens of all rows at `capacity` tokens per row."""
        return int(len(self) * int(capacity) - int(self.used.sum()))


def _check_capacity(capacity: int) -> int:
    if (
        isinstance(capacity, bool)
        or not isinstance(capacity, (int, np.integer))
        or not 1 <= capacity <= MAX_CAPACITY
    ):
        raise ValueError(
            f"capacity = {capacity!r} must be an integer in [1, {MAX_CAPACITY}] (tokens per row)"
        )
    return int(capacity)


def check_window(window: int) -> int:
    """`window` as an int, validated.

    Raises:
      ValueError: not an integer >= 1.
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(
            f"packing window = {window!r} must be an integer >= 1 (items packed together)"
        )
    return int(window)


@numba.njit(cache=True, nogil=True)
def _cut_kernel(lengths, order, capacity, keep):  # pragma: no cover - compiled
    # Item i has lengths[order[i]] tokens (lengths[i] when order is None). keep: 0 every piece,
    # 1 each item's first piece, 2 only the items of one piece (see `OVERFLOWS`).
    n = lengths.shape[0] if order is None else order.shape[0]
    total = 0
    split = 0
    for i in range(n):
        size = np.int64(lengths[i] if order is None else lengths[order[i]])
        if size > 0:
            pieces = (size + capacity - 1) // capacity
            if pieces > 1:
                split += 1
            total += pieces if keep == 0 else (1 if keep == 1 or pieces == 1 else 0)
    item = np.empty(total, np.int64)
    offset = np.empty(total, np.int64)
    length = np.empty(total, np.int64)
    m = 0
    for i in range(n):
        size = np.int64(lengths[i] if order is None else lengths[order[i]])
        if keep == 1:
            size = min(size, capacity)
        elif keep == 2 and size > capacity:
            continue
        start = 0
        while start < size:
            item[m] = i
            offset[m] = start
            length[m] = min(capacity, size - start)
            start += capacity
            m += 1
    return item, offset, length, split


def cut_items(
    lengths: np.ndarray, capacity: int, overflow: str = "cut", order: np.ndarray | None = None
) -> CutItems:
    """Cuts items longer than `capacity` into `capacity`-token pieces (see the module docstring).

    Args:
      lengths: item lengths (any integer dtype).
      capacity: tokens per row.
      overflow: which pieces of an item longer than a row are kept (`OVERFLOWS`): "cut" every
        piece, "truncate" only its first (its first row of tokens: conversations, whose tail
        without its beginning is not a sample), "drop" none. `split_items` counts the items
        longer than a row whatever the policy.
      order: the items are `lengths[order]` (saves gathering them), or None: `lengths`.

    Raises:
      ValueError: a capacity < 1, lengths that are not 1-D or are negative, an unknown
        ``overflow``.
    """
    capacity = _check_capacity(capacity)
    if overflow not in OVERFLOWS:
        raise ValueError(f"packing_overflow = {overflow!r}; expected one of {OVERFLOWS}")
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"item lengths must be 1-D, got shape {lengths.shape}")
    if lengths.size and int(lengths.min()) < 0:
        raise ValueError("item lengths must be >= 0")
    if order is not None:
        order = np.ascontiguousarray(order, np.int64)
    item, offset, length, split = _cut_kernel(
        np.ascontiguousarray(lengths), order, np.int64(capacity), OVERFLOWS.index(overflow)
    )
    return CutItems(item, offset, length, int(split))


_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)

MAX_ITEMS = (1 << 31) - 1
"""Items `best_fit_pack` takes in one call (its work arrays are int32)."""

MAX_CAPACITY = 1 << 26
"""Largest row the packer takes (its tables cost about 8 bytes per token of a row)."""


@numba.njit(cache=True, nogil=True, inline="always")
def _lowest(x):  # pragma: no cover - compiled
    # Index of the lowest set bit of a non-zero uint64 (one instruction).
    return np.int64(trailing_zeros(x))


@numba.njit(cache=True, nogil=True, inline="always")
def _set(words, summary, c):  # pragma: no cover - compiled
    w = c >> 6
    if words[w] == 0:
        summary[w >> 6] |= np.uint64(1) << np.uint64(w & 63)
    words[w] |= np.uint64(1) << np.uint64(c & 63)


@numba.njit(cache=True, nogil=True, inline="always")
def _clear(words, summary, c):  # pragma: no cover - compiled
    w = c >> 6
    words[w] &= ~(np.uint64(1) << np.uint64(c & 63))
    if words[w] == 0:
        summary[w >> 6] &= ~(np.uint64(1) << np.uint64(w & 63))


@numba.njit(cache=True, nogil=True, inline="always")
def _first_at_least(words, summary, lo):  # pragma: no cover - compiled
    # The smallest c >= lo whose bit is set, or -1: the rest of lo's word, then the summary
    # words (one bit per non-empty word) from the next word on.
    w = lo >> 6
    if w >= words.shape[0]:
        return -1
    x = words[w] & (_ALL << np.uint64(lo & 63))
    if x != 0:
        return (w << 6) + _lowest(x)
    w += 1
    v = w >> 6
    if w & 63 == 0:
        y = summary[v] if v < summary.shape[0] else np.uint64(0)
    else:
        y = summary[v] & (_ALL << np.uint64(w & 63))
    while True:
        if y != 0:
            w = (v << 6) + _lowest(y)
            return (w << 6) + _lowest(words[w])
        v += 1
        if v >= summary.shape[0]:
            return -1
        y = summary[v]


@numba.njit(cache=True, nogil=True)
def _longest_first(lengths, w0, w1, capacity, counts, order):  # pragma: no cover - compiled
    # Positions w0..w1-1 ordered by decreasing length, ties in position order (a stable sort):
    # a counting sort over the lengths 1..capacity into `order` when the window is large enough
    # to pay for it, else a merge sort.
    n = w1 - w0
    if n * 16 < capacity:
        return np.argsort(-lengths[w0:w1], kind="mergesort") + w0
    counts[:] = 0
    for i in range(w0, w1):
        counts[lengths[i]] += 1
    start = 0
    for c in range(capacity, -1, -1):
        k = counts[c]
        counts[c] = start
        start += k
    for i in range(w0, w1):
        c = lengths[i]
        order[counts[c]] = i
        counts[c] += 1
    return order[:n]


@numba.njit(cache=True, nogil=True)
def _best_fit_kernel(lengths, capacity, window):  # pragma: no cover - compiled
    # A window's pieces go only to rows opened in that window, so the work arrays are the
    # window's (rows and pieces numbered from the window's first): small enough to stay in
    # cache, allocated once. Each window's rows are written out when it closes.
    n = lengths.shape[0]
    span = max(1, min(window, n))
    words = np.zeros((capacity >> 6) + 1, np.uint64)  # rooms that some open row has
    summary = np.zeros((words.shape[0] >> 6) + 1, np.uint64)  # words that are not empty
    head = np.full(capacity + 1, -1, np.int32)  # a stack of open rows per room left
    below = np.empty(span, np.int32)  # the next row down each stack
    room = np.empty(span, np.int32)
    count = np.zeros(span, np.int32)
    row_of = np.empty(span, np.int32)  # each piece's row
    fill = np.empty(span, np.int64)
    order = np.empty(span, np.int64)
    counts = np.zeros(capacity + 1, np.int32)
    starts = np.empty(n + 1, np.int64)  # rows <= pieces; trimmed at the end
    used = np.empty(n, np.int64)
    pieces = np.empty(n, np.int64)
    starts[0] = 0
    rows = 0
    for w0 in range(0, n, window):
        w1 = min(n, w0 + window)
        placed = _longest_first(lengths, w0, w1, capacity, counts, order)
        opened = 0
        for j in range(placed.shape[0]):
            i = placed[j]
            need = lengths[i]
            c = _first_at_least(words, summary, need)
            if c < 0:
                b = opened
                opened += 1
                count[b] = 0
                left = capacity - need
            else:
                b = head[c]
                head[c] = below[b]
                if head[c] == -1:
                    _clear(words, summary, c)
                left = c - need
            room[b] = left
            if left > 0:
                if head[left] == -1:
                    _set(words, summary, left)
                below[b] = head[left]
                head[left] = b
            row_of[i - w0] = b
            count[b] += 1
        for b in range(opened):  # the window's rows close and are written out
            if room[b] > 0 and head[room[b]] != -1:
                head[room[b]] = -1
                _clear(words, summary, room[b])
            fill[b] = starts[rows + b]
            starts[rows + b + 1] = starts[rows + b] + count[b]
            used[rows + b] = capacity - room[b]
        for j in range(placed.shape[0]):
            i = placed[j]
            b = row_of[i - w0]
            pieces[fill[b]] = i
            fill[b] += 1
        rows += opened
    return starts[: rows + 1].copy(), pieces, used[:rows].copy()


def best_fit_pack(lengths: np.ndarray, capacity: int, window: int = DEFAULT_WINDOW) -> PackedRows:
    """Packs items of `lengths` tokens into rows of `capacity` tokens, best-fit decreasing within
    windows of `window` items (see the module docstring). Deterministic: no randomness.

    Args:
      lengths: item lengths in the order to pack them (each 1..capacity; cut longer items first
        with `cut_items`).
      capacity: tokens per row.
      window: items packed together.

    Returns:
      The rows (`PackedRows`); every item is in exactly one row.

    Raises:
      ValueError: a capacity or window < 1, lengths not 1-D, or an item of 0 or more than
        `capacity` tokens.
    """
    capacity = _check_capacity(capacity)
    window = check_window(window)
    lengths = np.ascontiguousarray(lengths, np.int64)
    if lengths.ndim != 1:
        raise ValueError(f"item lengths must be 1-D, got shape {lengths.shape}")
    if lengths.size and (int(lengths.min()) < 1 or int(lengths.max()) > capacity):
        raise ValueError(
            f"item lengths must be in [1, {capacity}] (cut longer items with cut_items), got "
            f"[{int(lengths.min())}, {int(lengths.max())}]"
        )
    if lengths.size >= MAX_ITEMS:
        raise ValueError(f"{lengths.size} items in one call; pack fewer than {MAX_ITEMS} at a time")
    starts, pieces, used = _best_fit_kernel(lengths, np.int64(capacity), np.int64(window))
    return PackedRows(starts, pieces, used)


@numba.njit(cache=True, nogil=True)
def _first_fit_kernel(lengths, capacity):  # pragma: no cover - compiled
    # First fit in the given order over every open row (a reference for benchmarks and tests).
    n = lengths.shape[0]
    room = np.empty(n, np.int64)
    row_of = np.empty(n, np.int64)
    rows = 0
    for i in range(n):
        b = -1
        for r in range(rows):
            if room[r] >= lengths[i]:
                b = r
                break
        if b < 0:
            b = rows
            rows += 1
            room[b] = capacity
        room[b] -= lengths[i]
        row_of[i] = b
    return row_of, rows


def first_fit_rows(lengths: np.ndarray, capacity: int) -> np.ndarray:
    """The row of each item under plain first fit in the given order (no sorting, every row kept
    open): the baseline best-fit decreasing is compared with. O(n x rows); for benchmarks and
    tests.

    Raises:
      ValueError: as `best_fit_pack`.
    """
    capacity = _check_capacity(capacity)
    lengths = np.ascontiguousarray(lengths, np.int64)
    if lengths.size and (int(lengths.min()) < 1 or int(lengths.max()) > capacity):
        raise ValueError(f"item lengths must be in [1, {capacity}]")
    row_of, _ = _first_fit_kernel(lengths, np.int64(capacity))
    return row_of

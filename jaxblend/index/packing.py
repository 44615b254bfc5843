"""Whole-item packing: items of known lengths into rows of a fixed capacity, best-fit decreasing.

The packer of `--packing=best_fit` (documents of a dataset) and of any other construction that
puts whole items (conversations, ...) into fixed-length rows. Two steps, both pure (numpy + Numba,
no randomness: the caller fixes the item order, e.g. with a seeded shuffle):

* `cut_items(lengths, capacity)`: an item longer than a row is cut into `capacity`-token pieces
  (the remainder, at the item's end, is a piece of its own); every other item is one piece.
  Empty items have no piece. With `overflow` ("truncate", "drop": `OVERFLOWS`) only the first
  piece of a longer item, or none of it, is kept.
* `best_fit_pack(lengths, capacity, window)`: the pieces, taken `window` at a time in the given
  order, are placed longest first (ties in the given order) each into the open row with the least
  room that still holds it, else into a new row. The rows of a window are closed when the window
  ends, so a window's rows depend only on its items. Rows are numbered in the order they were
  opened; the pieces of a row in the order they were placed.

`pack_items(lengths, capacity, window, overflow, order)` does both in one compiled pass, cutting
a window's pieces as it packs them (no array of all pieces is made), and gives each row's pieces
as (item, first token, tokens). A source of whole items uses it (`build_packed_epoch` is the
document case)::

    order = rng.permutation(num_items)                    # the order fixed by the seed
    packed = pack_items(lengths, capacity, window, order=order)
    # row r holds pieces [packed.starts[r], packed.starts[r + 1]); piece q is tokens
    # [packed.offset[q], packed.offset[q] + packed.length[q]) of item packed.item[q]

It builds the same rows as `best_fit_pack(cut_items(lengths[order], capacity).length, ...)`.
How it is fast (a counting sort per window, a two-level bitmap of the open rows' rooms, work
arrays of one window): docs/samples.md, "How rows are packed"; it costs O(n + capacity x windows)
(a merge sort for windows much smaller than a row).
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from jaxblend.validation import require_choice, require_int

try:  # Numba's intrinsic: one instruction
    from numba.cpython.unsafe.numbers import trailing_zeros
except ImportError:  # a Numba release that moved it: the same answer by a loop

    @numba.njit(cache=True, nogil=True)
    def trailing_zeros(x):  # pragma: no cover - compiled
        n = 0
        while not x & np.uint64(1):
            x >>= np.uint64(1)
            n += 1
        return n


PACKINGS = ("concat", "best_fit")
"""`GPTDataConfig.packing` values: Megatron's concatenate-and-cut samples, or packed rows."""

OVERFLOWS = ("cut", "truncate", "drop")
"""`GPTDataConfig.packing_overflow` values: what `cut_items` keeps of an item longer than a row."""

MAX_ITEMS = (1 << 31) - 1
"""Items the packer takes in one call (its work arrays and item ids are int32)."""

MAX_CAPACITY = 1 << 26
"""Largest row the packer takes (its tables cost about 8 bytes per token of a row)."""

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


@dataclasses.dataclass(frozen=True)
class PackedItems:
    """Rows of packed item pieces (`pack_items`).

    Attributes:
      starts: int64 `[R + 1]`; row r holds pieces `[starts[r], starts[r + 1])`.
      item: int32 `[P]`, each piece's item (`order[i]` with an `order`, else `i`).
      offset: int32 `[P]`, the piece's first token within its item.
      length: int32 `[P]`, tokens in the piece (1..capacity).
      split_items: number of items longer than a row.
    """

    starts: np.ndarray
    item: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    split_items: int

    def __len__(self) -> int:
        return int(self.starts.shape[0] - 1)


def _whole_items(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.int64]:
    """int64 `lengths` of items that each fill at most one row, and `capacity` (checked)."""
    lengths, _, capacity, _ = _items(lengths, capacity, "cut")
    if lengths.size and (int(lengths.min()) < 1 or int(lengths.max()) > capacity):
        raise ValueError(
            f"item lengths must be in [1, {capacity}] (cut longer items with cut_items), got "
            f"[{int(lengths.min())}, {int(lengths.max())}]"
        )
    return lengths.astype(np.int64, copy=False), capacity


@numba.njit(cache=True, nogil=True, inline="always")
def _kept(size, capacity, keep):  # pragma: no cover - compiled
    # Tokens of an item of `size` that are packed. keep: 0 every piece, 1 the first piece, 2 only
    # an item of one piece (the index of the `overflow` policy in `OVERFLOWS`).
    if keep == 1:
        return min(size, capacity)
    if keep == 2 and size > capacity:
        return 0
    return size


@numba.njit(cache=True, nogil=True)
def _count_pieces(lengths, order, capacity, keep):  # pragma: no cover - compiled
    # (pieces packed, items longer than a row) of items lengths[order[i]] (lengths[i] when order
    # is None).
    n = lengths.shape[0] if order is None else order.shape[0]
    total = 0
    split = 0
    for i in range(n):
        size = np.int64(lengths[i] if order is None else lengths[order[i]])
        if size > capacity:
            split += 1
        total += (_kept(size, capacity, keep) + capacity - 1) // capacity
    return total, split


def _items(lengths, capacity, overflow, order=None):
    """The checked arguments of `cut_items`/`pack_items` as their kernels take them."""
    require_int("capacity (tokens per row)", capacity, 1)
    if capacity > MAX_CAPACITY:
        raise ValueError(f"capacity = {capacity} is above the packer's {MAX_CAPACITY} tokens")
    require_choice("packing_overflow", overflow, OVERFLOWS)
    lengths = np.ascontiguousarray(lengths)
    if lengths.ndim != 1:
        raise ValueError(f"item lengths must be 1-D, got shape {lengths.shape}")
    if lengths.size and int(lengths.min()) < 0:
        raise ValueError("item lengths must be >= 0")
    if lengths.size >= MAX_ITEMS:
        raise ValueError(f"{lengths.size} items in one call; pack fewer than {MAX_ITEMS} at a time")
    if order is not None:
        order = np.ascontiguousarray(order)
        if order.dtype.kind not in "iu":
            raise ValueError(f"item order must be integers, got {order.dtype}")
        if order.size and (int(order.min()) < 0 or int(order.max()) >= lengths.size):
            raise ValueError(f"item order outside [0, {lengths.size})")
    return lengths, order, np.int64(capacity), OVERFLOWS.index(overflow)


def cut_items(lengths: np.ndarray, capacity: int, overflow: str = "cut") -> CutItems:
    """Cuts items longer than `capacity` into `capacity`-token pieces (see the module docstring).

    Args:
      lengths: item lengths (any integer dtype).
      capacity: tokens per row.
      overflow: which pieces of an item longer than a row are kept (`OVERFLOWS`): "cut" every
        piece, "truncate" only its first (its first row of tokens: conversations, whose tail
        without its beginning is not a sample), "drop" none. `split_items` counts the items
        longer than a row whatever the policy.

    Raises:
      ValueError: a capacity < 1, lengths that are not 1-D or are negative, an unknown
        ``overflow``.
    """
    lengths, _, capacity, keep = _items(lengths, capacity, overflow)
    size = lengths.astype(np.int64)
    kept = (size, np.minimum(size, capacity), np.where(size > capacity, 0, size))[keep]
    pieces = -(-kept // capacity)
    item = np.repeat(np.arange(size.shape[0], dtype=np.int64), pieces)
    offset = (np.arange(item.shape[0]) - np.repeat(np.cumsum(pieces) - pieces, pieces)) * capacity
    length = np.minimum(capacity, kept[item] - offset)
    return CutItems(item, offset, length, int(np.count_nonzero(size > capacity)))


_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)

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
def _longest_first(lengths, capacity, counts, order):  # pragma: no cover - compiled
    # Positions of `lengths` ordered by decreasing length, ties in position order (a stable
    # sort): a counting sort over the lengths 1..capacity into `order` when there are enough of
    # them to pay for it, else a merge sort.
    n = lengths.shape[0]
    if n * 16 < capacity:
        return np.argsort(-lengths, kind="mergesort")
    counts[:] = 0
    for i in range(n):
        counts[lengths[i]] += 1
    start = 0
    for c in range(capacity, -1, -1):
        k = counts[c]
        counts[c] = start
        start += k
    for i in range(n):
        c = lengths[i]
        order[counts[c]] = i
        counts[c] += 1
    return order[:n]


@numba.njit(cache=True, nogil=True)
def _window_work(capacity, span):  # pragma: no cover - compiled
    # The packer's work arrays for windows of up to `span` pieces (rows and pieces numbered from
    # the window's first), reused window after window.
    words = np.zeros((capacity >> 6) + 1, np.uint64)  # rooms that some open row has
    summary = np.zeros((words.shape[0] >> 6) + 1, np.uint64)  # words that are not empty
    head = np.full(capacity + 1, -1, np.int32)  # a stack of open rows per room left
    below = np.empty(span, np.int32)  # the next row down each stack
    room = np.empty(span, np.int32)  # room left in each row
    count = np.empty(span, np.int32)  # pieces in each row, then where its next piece goes
    row_of = np.empty(span, np.int32)  # each piece's row
    order = np.empty(span, np.int64)
    counts = np.zeros(capacity + 1, np.int32)
    return words, summary, head, below, room, count, row_of, order, counts


@numba.njit(cache=True, nogil=True)
def _pack_window(lengths, capacity, work, starts, used, rows, slot):  # pragma: no cover - compiled
    # Packs one window's pieces (`lengths`) into new rows numbered from `rows`: writes the rows'
    # `starts[rows + 1:]` and `used[rows:]`, and each piece's place in the rows' pieces in `slot`.
    # Returns the rows opened.
    words, summary, head, below, room, count, row_of, order, counts = work
    placed = _longest_first(lengths, capacity, counts, order)
    opened = 0
    for j in range(placed.shape[0]):
        i = placed[j]
        need = lengths[i]
        # A full piece fits no open row (each holds a piece): no look-up.
        c = -1 if need == capacity else _first_at_least(words, summary, need)
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
        row_of[i] = b
        count[b] += 1
    for b in range(opened):  # the window's rows close
        if room[b] > 0 and head[room[b]] != -1:
            head[room[b]] = -1
            _clear(words, summary, room[b])
        starts[rows + b + 1] = starts[rows + b] + count[b]
        count[b] = starts[rows + b]
        used[rows + b] = capacity - room[b]
    for j in range(placed.shape[0]):
        i = placed[j]
        b = row_of[i]
        slot[i] = count[b]
        count[b] += 1
    return opened


@numba.njit(cache=True, nogil=True)
def _pack_pieces(k, capacity, work, starts, used, rows, slot, pieces):  # pragma: no cover
    # Packs the first k pieces of the window buffers and writes them to their rows' places.
    piece_item, piece_offset, piece_length, item, offset, length = pieces
    opened = _pack_window(piece_length[:k], capacity, work, starts, used, rows, slot)
    for j in range(k):
        item[slot[j]] = piece_item[j]
        offset[slot[j]] = piece_offset[j]
        length[slot[j]] = piece_length[j]
    return opened


@numba.njit(cache=True, nogil=True)
def _pack_items_kernel(lengths, order, capacity, window, keep):  # pragma: no cover - compiled
    # cut_items then best_fit_pack, a window of pieces at a time: each window's pieces are cut
    # into window-sized buffers, packed, and written to their rows' places.
    total, split = _count_pieces(lengths, order, capacity, keep)
    span = max(1, min(window, total))
    work = _window_work(capacity, span)
    slot = np.empty(span, np.int64)
    piece_item = np.empty(span, np.int32)
    piece_offset = np.empty(span, np.int32)
    piece_length = np.empty(span, np.int64)
    starts = np.empty(total + 1, np.int64)  # rows <= pieces; trimmed at the end
    used = np.empty(total, np.int64)
    item = np.empty(total, np.int32)
    offset = np.empty(total, np.int32)
    length = np.empty(total, np.int32)
    starts[0] = 0
    rows = 0
    k = 0
    pieces = (piece_item, piece_offset, piece_length, item, offset, length)
    for i in range(lengths.shape[0] if order is None else order.shape[0]):
        name = i if order is None else order[i]
        size = _kept(np.int64(lengths[name]), capacity, keep)
        for start in range(0, size, capacity):
            piece_item[k] = name
            piece_offset[k] = start
            piece_length[k] = min(capacity, size - start)
            k += 1
            if k == window:
                rows += _pack_pieces(k, capacity, work, starts, used, rows, slot, pieces)
                k = 0
    if k > 0:
        rows += _pack_pieces(k, capacity, work, starts, used, rows, slot, pieces)
    return starts[: rows + 1].copy(), item, offset, length, split, used[:rows].copy()


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
    lengths, capacity = _whole_items(lengths, capacity)
    require_int("packing window (items packed together)", window, 1)
    # Every item is one piece: `pack_items`'s rows are the rows of the items.
    starts, item, _, _, _, used = _pack_items_kernel(lengths, None, capacity, np.int64(window), 0)
    return PackedRows(starts, item.astype(np.int64), used)


def pack_items(
    lengths: np.ndarray,
    capacity: int,
    window: int = DEFAULT_WINDOW,
    overflow: str = "cut",
    order: np.ndarray | None = None,
) -> PackedItems:
    """Cuts items and packs their pieces (`cut_items` then `best_fit_pack`, the same rows) in one
    compiled pass that never holds all the pieces at once.

    Args:
      lengths: item lengths (any integer dtype, >= 0).
      capacity: tokens per row.
      window: pieces packed together.
      overflow: what is kept of an item longer than a row (`cut_items`).
      order: the items are `lengths[order]` (integer indices into `lengths`; the pieces name
        `order[i]`), or None: `lengths`.

    Raises:
      ValueError: as `cut_items` and `best_fit_pack`, or an `order` outside `lengths`.
    """
    lengths, order, capacity, keep = _items(lengths, capacity, overflow, order)
    require_int("packing window (items packed together)", window, 1)
    starts, item, offset, length, split, _ = _pack_items_kernel(
        lengths, order, capacity, np.int64(window), keep
    )
    return PackedItems(starts, item, offset, length, int(split))


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
    row_of, _ = _first_fit_kernel(*_whole_items(lengths, capacity))
    return row_of

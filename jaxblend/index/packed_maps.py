"""Packed index maps: whole documents packed into rows (`--packing=best_fit`).

A packed dataset's samples are rows of at most `seq_length + extra` tokens (the window the GPT
source reads), each holding whole documents (sequences) and padding, instead of Megatron's
concatenate-and-cut windows. One epoch of one dataset split (`build_packed_epoch`) is built in
the four steps of docs/samples.md ("How rows are packed"): sequences in an order drawn with
`RandomState(seed)`, cut and packed by `packing.pack_items`, rows in an order drawn from the same
generator (kept as an index, `order`: the rows themselves stay in the order they were packed).

Each sequence's tokens are in exactly one row of an epoch. A dataset asked for N samples gets
whole epochs until it has at least N rows (one epoch when N is None); epoch e uses the seed
`blend_schedule.epoch_seed(seed, e)` (the seed itself for epoch 0), so epoch e is the same
whatever the number of epochs, and the first rows of a dataset are its first epoch.

`PackedSplitMaps` is a `SplitMaps` over these rows: a split of one packed dataset, or a blend
(weighted, unweighted or staged) whose `dataset_index`/`dataset_sample_index` pick rows of each
packed dataset, exactly as they pick GPT samples. Its arrays (named `<split>.<array>` in a
map-store entry):

* `packed_starts` int64 `[R + 1]`: the pieces of row q (over all datasets of the split, dataset
  j's rows from `offsets[j, 1]`) are `[packed_starts[q], packed_starts[q + 1])`;
* `packed_sequence` int32 `[P]`: the piece's sequence within its dataset;
* `packed_offset` int32 `[P]`: its first token within the sequence;
* `packed_length` int32 `[P]`: its tokens;
* `offsets` int64 `[J, 4]`: dataset j's (first piece, first row, epochs, rows);
* `packed_order` int64 `[R]`: sample q of dataset j is row `offsets[j, 1] + packed_order[
  offsets[j, 1] + q]` (epoch e's samples are a permutation of epoch e's rows);
* `packed_epoch_rows` int64 `[sum of epochs]`: rows of each epoch of each dataset, in order;
* `constituent_prefix`, and for a blend `dataset_index`, `dataset_sample_index`, as in GPT maps.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from jaxblend.index import blend_schedule, gpt, packing
from jaxblend.index.row_table import gather_pieces
from jaxblend.index.split_maps import Spans, SplitMaps, resolve_samples

PACKED_FIELDS = (
    "packed_starts", "packed_sequence", "packed_offset", "packed_length", "packed_order", "offsets",
    "packed_epoch_rows", "constituent_prefix", "dataset_index", "dataset_sample_index",
)


@dataclasses.dataclass(frozen=True)
class PackedDatasetMaps:
    """The packed rows of one dataset split, epochs end to end.

    Attributes:
      starts: int64 `[R + 1]`, row q's pieces are `[starts[q], starts[q + 1])`.
      sequence: int32 `[P]`, each piece's sequence id in the dataset.
      offset: int32 `[P]`, each piece's first token within its sequence.
      length: int32 `[P]`, each piece's tokens.
      order: int64 `[R]`, sample q is row `order[q]` (a permutation of each epoch's rows).
      epoch_rows: int64 `[E]`, rows of each epoch.
      split_documents: sequences longer than a row (cut into pieces), per epoch.
      capacity: tokens per row.
    """

    starts: np.ndarray
    sequence: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    order: np.ndarray
    epoch_rows: np.ndarray
    split_documents: int
    capacity: int

    def __len__(self) -> int:
        return int(self.starts.shape[0] - 1)

    @property
    def padding(self) -> int:
        """Padding tokens of all rows."""
        return int(len(self) * self.capacity - int(self.length.sum(dtype=np.int64)))


def build_packed_epoch(
    sequence_lengths: np.ndarray,
    documents: np.ndarray,
    capacity: int,
    seed: int,
    window: int = packing.DEFAULT_WINDOW,
    overflow: str = "cut",
) -> PackedDatasetMaps:
    """One epoch of packed rows of a dataset split (see the module docstring).

    Args:
      sequence_lengths: every sequence length of the dataset.
      documents: the split's sequence ids.
      capacity: tokens per row (`seq_length + extra`).
      seed: the `RandomState` seed of this epoch.
      window: pieces packed together.
      overflow: a sequence longer than a row is "cut" into row-sized pieces (all packed),
        "truncate"d to its first row-sized piece, or "drop"ped (`packing.cut_items`).
    """
    documents = np.asarray(documents)
    rng = gpt._random_state(int(seed))
    docs = documents[rng.permutation(documents.shape[0])]  # split_indices: int32, no copy to int64
    rows = packing.pack_items(sequence_lengths, capacity, window, overflow, order=docs)
    return PackedDatasetMaps(
        starts=rows.starts,
        sequence=rows.item,
        offset=rows.offset,
        length=rows.length,
        order=rng.permutation(len(rows)).astype(np.int64, copy=False),
        epoch_rows=np.array([len(rows)], np.int64),
        split_documents=rows.split_items,
        capacity=int(capacity),
    )


def build_packed_dataset_maps(
    sequence_lengths: np.ndarray,
    documents: np.ndarray,
    num_samples: int | None,
    capacity: int,
    seed: int,
    window: int = packing.DEFAULT_WINDOW,
    *,
    name: str = "dataset",
    overflow: str = "cut",
) -> PackedDatasetMaps:
    """The packed rows of one dataset split: whole epochs until there are `num_samples` rows.

    Args:
      sequence_lengths: every sequence length of the dataset.
      documents: the split's sequence ids.
      num_samples: rows requested (None: one epoch).
      capacity: tokens per row.
      seed: the seed of epoch 0 (epoch e: `blend_schedule.epoch_seed(seed, e)`).
      window: pieces packed together.
      name: the dataset and split, for messages.
      overflow: what happens to a sequence longer than a row (`build_packed_epoch`).

    Raises:
      ValueError: rows requested from a split without tokens.
    """
    epochs: list[PackedDatasetMaps] = []
    total = 0
    while True:
        e = len(epochs)
        epoch = build_packed_epoch(
            sequence_lengths, documents, capacity, blend_schedule.epoch_seed(seed, e), window,
            overflow,
        )
        if len(epoch) == 0 and num_samples:
            raise ValueError(
                f"{name}: the split has no tokens ({len(documents)} sequences) but "
                f"num_samples = {num_samples} rows were requested"
            )
        epochs.append(epoch)
        total += len(epoch)
        if num_samples is None or total >= num_samples:
            break
    return _end_to_end(epochs, move_order=True)[0]


def _end_to_end(
    maps: list[PackedDatasetMaps], move_order: bool
) -> tuple[PackedDatasetMaps, np.ndarray]:
    """`maps` end to end (rows and pieces numbered on; the first one's split documents) and
    `offsets` int64 `[J, 4]`: each one's (first piece, first row, epochs, rows). Each one's
    `order` is moved by the rows before it when `move_order` (epochs of one dataset), else kept
    (datasets of a split, whose rows are found through `offsets`)."""
    offsets = np.zeros((len(maps), 4), np.int64)
    offsets[:, 2] = [len(m.epoch_rows) for m in maps]
    offsets[:, 3] = [len(m) for m in maps]
    offsets[1:, 0] = np.cumsum([int(m.starts[-1]) for m in maps[:-1]])
    offsets[1:, 1] = np.cumsum(offsets[:-1, 3])
    if len(maps) == 1:
        return maps[0], offsets
    joined = PackedDatasetMaps(
        starts=np.concatenate(
            [np.zeros(1, np.int64)] + [m.starts[1:] + o for m, o in zip(maps, offsets[:, 0])]
        ),
        sequence=np.concatenate([m.sequence for m in maps]),
        offset=np.concatenate([m.offset for m in maps]),
        length=np.concatenate([m.length for m in maps]),
        order=np.concatenate(
            [m.order + o if move_order else m.order for m, o in zip(maps, offsets[:, 1])]
        ),
        epoch_rows=np.concatenate([m.epoch_rows for m in maps]),
        split_documents=maps[0].split_documents,
        capacity=maps[0].capacity,
    )
    return joined, offsets


def concatenated_arrays(
    name: str, maps: list[PackedDatasetMaps], constituent_prefix: list[int]
) -> dict[str, np.ndarray]:
    """The packed maps of a split's datasets end to end, named `<name>.<array>` (see the module
    docstring)."""
    joined, offsets = _end_to_end(maps, move_order=False)
    return {
        f"{name}.packed_starts": joined.starts,
        f"{name}.packed_sequence": joined.sequence,
        f"{name}.packed_offset": joined.offset,
        f"{name}.packed_length": joined.length,
        f"{name}.offsets": offsets,
        f"{name}.packed_order": joined.order,
        f"{name}.packed_epoch_rows": joined.epoch_rows,
        f"{name}.constituent_prefix": np.array(constituent_prefix, np.int64),
    }


@numba.njit(cache=True, nogil=True)
def _packed_rows(
    sample_ids, blended, dataset_index, dataset_sample_index, offsets, order
):  # pragma: no cover - compiled
    ds, local = resolve_samples(sample_ids, blended, dataset_index, dataset_sample_index)
    rows = np.empty(sample_ids.shape[0], np.int64)
    for r in range(sample_ids.shape[0]):
        rows[r] = offsets[ds[r], 1] + order[offsets[ds[r], 1] + local[r]]
    return ds, rows


class PackedSplitMaps(SplitMaps):
    """A split whose samples are packed rows (see the module docstring).

    The same questions as `SplitMaps` (length, datasets, `locate`, `dataset_ids`, `spans`,
    `pieces`), answered from packed rows: a row's pieces are whole documents (or row-sized pieces
    of a document longer than a row), at most `window` tokens in all, the rest padding.

    Args:
      split_documents: per dataset, documents longer than a row (cut) in one epoch.
      window: pieces packed together (`GPTDataConfig.packing_window`).
      split: `SplitMaps`'s arguments but `megatron_dtypes`; `arrays` are `PACKED_FIELDS` (without
        the split prefix).
    """

    def __init__(self, *, split_documents: list[int], window: int, **split) -> None:
        self.packing_window = int(window)
        self.split_documents = [int(n) for n in split_documents]
        super().__init__(**split, megatron_dtypes=[])

    def _init_samples(self, arrays: dict[str, np.ndarray], megatron_dtypes) -> None:
        """The arrays of the packed rows (`PACKED_FIELDS`)."""
        self._starts = arrays["packed_starts"]
        self._sequence = arrays["packed_sequence"]
        self._offset = arrays["packed_offset"]
        self._piece_length = arrays["packed_length"]
        self._order = arrays["packed_order"]
        self._epoch_rows = np.asarray(arrays["packed_epoch_rows"], np.int64)
        self._epochs = None
        self._megatron_dtypes = megatron_dtypes

    is_packed = True

    def dataset_epoch_rows(self, dataset_id: int) -> np.ndarray:
        """Rows of each epoch of dataset `dataset_id` (int64 `[E]`)."""
        if not 0 <= dataset_id < self.num_datasets:
            raise IndexError(f"dataset_id {dataset_id} out of range [0, {self.num_datasets})")
        before = int(self._offsets[:dataset_id, 2].sum())
        return self._epoch_rows[before : before + int(self._offsets[dataset_id, 2])].copy()

    def dataset_rows(self, dataset_id: int) -> PackedDatasetMaps:
        """Dataset `dataset_id`'s packed rows (its `starts` count from its first piece; its
        sample q is row `order[q]`)."""
        epoch_rows = self.dataset_epoch_rows(dataset_id)  # checks the id
        first_piece, first_row, _, rows = (int(v) for v in self._offsets[dataset_id])
        starts = np.asarray(self._starts[first_row : first_row + rows + 1], np.int64)
        pieces = slice(int(starts[0]), int(starts[-1]))
        return PackedDatasetMaps(
            starts=starts - first_piece,
            sequence=np.asarray(self._sequence[pieces]),
            offset=np.asarray(self._offset[pieces]),
            length=np.asarray(self._piece_length[pieces]),
            order=np.asarray(self._order[first_row : first_row + rows], np.int64),
            epoch_rows=epoch_rows,
            split_documents=self.split_documents[dataset_id],
            capacity=self.window,
        )

    def packing_stats(self) -> dict[str, int]:
        """Rows, tokens, padding tokens (over `window`-token rows) and split documents (one
        epoch of each dataset) of the split's datasets' packed maps (every row built, drawn or
        not)."""
        rows = int(self._offsets[:, 3].sum())
        tokens = int(np.asarray(self._piece_length).sum(dtype=np.int64))
        return {
            "rows": rows,
            "tokens": tokens,
            "padding": rows * self.window - tokens,
            "split_documents": sum(self.split_documents),
        }

    def constituent(self, dataset_id: int, epoch: int | None = None):
        """Not available: packed rows have no Megatron GPT maps.

        Raises:
          ValueError: always.
        """
        raise ValueError(
            f"split {self.name!r} is packed (--packing=best_fit): its datasets have packed rows, "
            "not Megatron's document/sample/shuffle indices"
        )

    def spans(self, sample_ids: np.ndarray, keep_empty: bool = False) -> Spans:
        """All pieces of the given samples (one compiled call); a packed row has no empty piece,
        so `keep_empty` changes nothing.

        Raises:
          IndexError: a sample id out of range.
        """
        ids = self._check_many(sample_ids)
        ds, rows = _packed_rows(ids, *self._blend_arrays(), self._offsets, self._order)
        row, seq, off, length = gather_pieces(
            rows, self._starts, 0, self._sequence, self._offset, self._piece_length
        )
        return Spans(row=row, dataset=ds[row].astype(np.int32), sequence=seq, offset=off, length=length)

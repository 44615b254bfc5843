"""Sequence positions of `IndexedDataset`s as `.bin` token offsets, and reads in sequence units.

Callers that hold Megatron's view of a dataset (sequence ids, token offsets within a sequence)
use `SequenceSpans`: `token_offsets` turns (dataset, sequence, offset) into the token offset in
that dataset's `.bin` with one compiled call over the datasets' `.idx` byte pointers
(`_gather.sequence_starts`), and `read` reads such spans through the one `TokenReader`. Byte
pointers stay in the storage layer: the split-maps span index (`jaxblend.sources.span_index`), the
masked-LM sources and `SequenceSource` speak in sequences and tokens.

A remote dataset's `.idx` is fetched the first time one of its sequences is named (the ones of a
call concurrently, one round trip); local `.idx` files are already mapped.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxblend import access as access_lib
from jaxblend.storage import _gather
from jaxblend.storage.token_reader import TokenReader

if TYPE_CHECKING:
    from jaxblend.storage.reader import IndexedDataset


class SequenceSpans:
    """Token spans of sequences of several `IndexedDataset`s (thread-safe, picklable).

    Args:
      datasets: the datasets; spans name them by position in this sequence.
      access: how the `.bin` files are read (default: the first dataset's, else
        `DataAccess.from_env()`).
    """

    def __init__(
        self, datasets: Sequence[IndexedDataset], access: access_lib.DataAccess | None = None
    ) -> None:
        self.datasets = list(datasets)
        if access is None:
            access = self.datasets[0].access if self.datasets else access_lib.DataAccess.from_env()
        self.access = access
        self._lock = threading.Lock()
        self._tokens: TokenReader | None = None
        n = len(self.datasets)
        self._pointer_addr = np.zeros(n, np.int64)
        self._sequence_count = np.full(n, -1, np.int64)  # -1 until the pointers are held
        self._itemsize = np.ones(n, np.int64)
        self._pointers: list[Any] = [None] * n  # keeps the arrays behind the addresses alive
        self._all_held = False  # set once every dataset's pointers are held

    def __reduce__(self):  # pickled as its arguments: each process opens its own
        return type(self), (self.datasets, self.access)

    @property
    def tokens(self) -> TokenReader:
        """The token reader over the datasets' `.bin` files (built on first use)."""
        if self._tokens is None:
            with self._lock:
                if self._tokens is None:
                    self._tokens = TokenReader([d.bin_dataset for d in self.datasets], self.access)
        return self._tokens

    @property
    def requests(self) -> int:
        """Object-store requests issued so far by this process for the tokens."""
        return 0 if self._tokens is None else self._tokens.requests

    def token_offsets(
        self, dataset: np.ndarray, sequence: np.ndarray, offset: np.ndarray
    ) -> np.ndarray:
        """int64 `.bin` token offset of token `offset[j]` of sequence `sequence[j]` of dataset
        `dataset[j]`, for every j.

        Raises:
          IndexError: a dataset or sequence id out of range, or a negative offset.
        """
        dataset, sequence, offset = (
            np.ascontiguousarray(a, np.int64).reshape(-1) for a in (dataset, sequence, offset)
        )
        out = np.empty(dataset.shape[0], np.int64)
        n = len(self.datasets)
        if not self._all_held and dataset.size:  # else the kernel checks the dataset ids
            if dataset.min() < 0 or dataset.max() >= n:
                self._refuse_dataset(dataset)
            touched = np.flatnonzero(np.bincount(dataset, minlength=n))
            missing = touched[self._sequence_count[touched] < 0].tolist()
            if missing:
                self._hold_pointers(missing)
        bad = _gather.sequence_starts(
            self._pointer_addr, self._sequence_count, self._itemsize, dataset, sequence, offset, out
        )
        if bad >= 0:
            if not 0 <= dataset[bad] < n:
                self._refuse_dataset(dataset)
            ds = self.datasets[int(dataset[bad])]
            raise IndexError(
                f"span {bad} (sequence {int(sequence[bad])}, offset {int(offset[bad])}) is not "
                f"inside the {len(ds)} sequences of {ds.prefix}: the index maps do not match the "
                "data"
            )
        return out

    def _refuse_dataset(self, dataset: np.ndarray) -> None:
        n = len(self.datasets)
        bad = int(dataset[(dataset < 0) | (dataset >= n)][0])
        raise IndexError(f"a span names dataset {bad}; there are {n}")

    def read(
        self,
        dataset: np.ndarray,
        sequence: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        out: np.ndarray,
        out_pos: np.ndarray,
    ) -> None:
        """Copies tokens `[offset[j], offset[j] + length[j])` of sequence `sequence[j]` of dataset
        `dataset[j]` to `out[out_pos[j] : out_pos[j] + length[j]]`, for every j (one
        `TokenReader.read`; errors as there, plus `IndexError` for a missing sequence)."""
        starts = self.token_offsets(dataset, sequence, offset)
        self.tokens.read(dataset, starts, length, out, out_pos)

    def _hold_pointers(self, ids: list[int]) -> None:
        """Takes the `.idx` pointers of datasets `ids` (remote ones fetched concurrently)."""
        datasets = [self.datasets[d] for d in ids]
        remote = [ds for ds in datasets if ds.is_remote]
        if len(remote) > 1:
            workers = min(len(remote), self.access.object_store.request_concurrency)
            with concurrent.futures.ThreadPoolExecutor(workers, "jaxblend-idx") as pool:
                list(pool.map(lambda ds: ds.sequence_pointers, remote))
        for d, ds in zip(ids, datasets, strict=True):
            pointers = np.ascontiguousarray(ds.sequence_pointers, dtype=np.int64)
            with self._lock:
                if self._sequence_count[d] >= 0:
                    continue
                self._pointers[d] = pointers
                self._pointer_addr[d] = pointers.ctypes.data
                self._itemsize[d] = ds.dtype.itemsize
                self._sequence_count[d] = pointers.shape[0]  # last: now readable
                self._all_held = bool((self._sequence_count >= 0).all())

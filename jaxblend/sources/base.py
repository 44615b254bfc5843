"""The batch-source protocol shared by every jaxblend source.

Every source is a Grain `RandomAccessDataSource` (`__len__`, `__getitem__(i)` -> dict of numpy
arrays; deterministic, thread-safe, picklable, with a stable `__repr__`). On top of that the loader
uses `get_batch(sample_ids)`, which must equal stacking `source[i]` for each id but reads the whole
batch at once (one batched storage call, one compiled kernel); and `fingerprint`, a string that
changes whenever the samples would. Sources may split `get_batch` into `read_batch` (compact raw
form, run where the data is read) and `assemble_batch` (run in the training process). Every
`BatchSource` is a `jaxblend.loading.protocols.LoaderSource` (docs/design.md, "Two-phase reads").
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np


class PerProcess:
    """Pickling of an object with per-process members (Grain workers): its `_lock` is made anew
    and the members named in `PER_PROCESS` travel as None, each process building its own on
    first use."""

    PER_PROCESS: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        state.update(dict.fromkeys(self.PER_PROCESS))
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class BatchSource(abc.ABC):
    """Base for sources that assemble whole batches; single items are batches of one."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of samples."""

    @abc.abstractmethod
    def get_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Returns the samples `sample_ids`, stacked along a new leading axis."""

    @property
    @abc.abstractmethod
    def fingerprint(self) -> str:
        """Identity of the sample stream (config + data content), for resume checks."""

    @property
    def reads_remote(self) -> bool:
        """Whether samples are read from an object store (loaders then read further ahead)."""
        return False

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Phase 1 of `get_batch`: the compact raw form of the samples (I/O-bound part).

        `get_batch(ids) == assemble_batch(read_batch(ids))`. Loaders run `read_batch` in Grain
        reader threads or worker processes and `assemble_batch` in the training process, so
        only the compact form crosses process boundaries. Sources without a cheaper raw form
        keep this default (the whole batch) and the identity `assemble_batch`.
        """
        return self.get_batch(sample_ids)

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Phase 2 of `get_batch`: raw form -> batch schema (see `read_batch`)."""
        return raw

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        n = len(self)
        i = int(index) + (n if int(index) < 0 else 0)
        if not 0 <= i < n:
            raise IndexError(f"{type(self).__name__} index {index} out of range [0, {n})")
        batch = self.get_batch(np.array([i], dtype=np.int64))
        return {key: value[0] for key, value in batch.items()}

    def _check_ids(self, sample_ids) -> np.ndarray:
        ids = np.asarray(sample_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            bad = ids[(ids < 0) | (ids >= len(self))][0]
            raise IndexError(f"{type(self).__name__} sample id {bad} out of range [0, {len(self)})")
        return ids


def stack_items(items: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stacks per-sample dicts into a batch dict (`GrainSourceAdapter` over plain Grain sources)."""
    if not items:
        raise ValueError("cannot stack an empty list of samples")
    return {key: np.stack([np.asarray(item[key]) for item in items]) for key in items[0]}

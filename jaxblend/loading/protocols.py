"""What loading needs from a source: typed seams instead of attribute probing.

Every jaxblend source (`jaxblend.sources.base.BatchSource`) is a `LoaderSource`;
`SequenceSource` is also a `PaddedLoaderSource`, which token-budget plans need. A plain Grain
random-access source (dict samples, no batched read) is loaded through `GrainSourceAdapter`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from jaxblend.sources.base import stack_items

if TYPE_CHECKING:
    from grain.sources import RandomAccessDataSource  # `len` and `source[i]` -> a dict of arrays


class LoaderSource(Protocol):
    """A source the loader reads whole steps from (docs/design.md, "Two-phase reads")."""

    def __len__(self) -> int:
        """Number of samples."""

    @property
    def fingerprint(self) -> str | None:
        """Identity of the samples (None: the source has none and a loader cannot resume it)."""

    @property
    def reads_remote(self) -> bool:
        """Whether samples come from an object store (the loader then reads further ahead)."""

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        """Phase 1: the compact raw form of the samples (runs in reader threads or Grain workers)."""

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Phase 2: raw form -> batch schema (runs in the training process)."""


@runtime_checkable
class PaddedLoaderSource(LoaderSource, Protocol):
    """A source of variable-length samples, read padded to a step's length (bucketed plans)."""

    def get_padded_batch(self, sample_ids: np.ndarray, length: int) -> dict[str, np.ndarray]:
        """Samples `sample_ids` (-1 = empty row) padded or truncated to `length` tokens, in the
        batch schema (no assembly step)."""


class GrainSourceAdapter:
    """A `LoaderSource` over a plain Grain random-access source (one read per sample, stacked).

    Args:
      source: the Grain source.
      fingerprint: identity of its samples, if known (without one the loader cannot resume from
        a state, only from a step number).
    """

    reads_remote = False

    def __init__(self, source: RandomAccessDataSource, fingerprint: str | None = None):
        self.source = source
        self.fingerprint = fingerprint

    def __len__(self) -> int:
        return len(self.source)

    def __repr__(self) -> str:
        return f"GrainSourceAdapter({self.source!r}, fingerprint={self.fingerprint!r})"

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        return stack_items([self.source[int(i)] for i in sample_ids])

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return raw

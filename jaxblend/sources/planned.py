"""Sources over index maps: sample i -> pieces of documents -> one batched read -> schema arrays.

`PlannedSource` holds the datasets of a blend and the `SplitMaps` of one split. `get_batch` asks
the plan for every piece of every requested sample at once (`SplitMaps.spans`, a compiled kernel),
reads every piece of every constituent dataset with one `SpanGather.read` (one compiled kernel
over memory-mapped files, one batch of concurrent requests for object stores) straight into
`[k, seq_length + extra]` windows, and builds the schema arrays with one compiled kernel. Sample windows equal Megatron-Core's (`GPTDataset`/`BlendedDataset`) for the same
files, configuration and seed.

Pickling drops opened handles and, when the source was built by `open_gpt_sources`, the index
maps too: each Grain worker re-opens the datasets and reloads the maps (memory-mapped from the
cache) instead of receiving copies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np

from jaxblend.index.split_maps import SplitMaps
from jaxblend.sources import base, schema
from jaxblend.sources.source_identity import gpt_source_fingerprint
from jaxblend.storage import IndexedDataset
from jaxblend.storage.protocols import SequenceReader
from jaxblend.storage.span_gather import SpanGather

Reopener = Callable[[], tuple[Sequence[IndexedDataset], SplitMaps]]


@numba.njit(cache=True, nogil=True)
def _destinations(span_row, span_length, num_rows):  # pragma: no cover - compiled
    dest = np.empty(span_row.shape[0], np.int64)
    n_valid = np.zeros(num_rows, np.int64)
    for s in range(span_row.shape[0]):
        r = span_row[s]
        dest[s] = n_valid[r]
        n_valid[r] += span_length[s]
    return dest, n_valid


class PlannedSource(base.BatchSource):
    """Samples of one split of a GPT blend (or single dataset), read in batches.

    Args:
      datasets: the constituent `IndexedDataset`s, in the plan's dataset order (read through
        `SpanGather`, the storage layer's `SequenceReader`, in sequence units).
      plan: the split's `SplitMaps` (from `jaxblend.index.build_data_maps`).
      options: schema options; `seq_length` and `add_extra_token_to_sequence` must match the plan.
      fingerprint: identity of the data plan (`DataMaps.fingerprint`) plus the split.
      reopen: optional picklable callable returning `(datasets, plan)`; when given, pickling
        carries it instead of the maps.
      split: the split name, for messages and repr.
    """

    def __init__(
        self,
        datasets: Sequence[IndexedDataset],
        plan: SplitMaps,
        options: schema.GPTSchemaOptions,
        *,
        fingerprint: str,
        split: str = "train",
        reopen: Reopener | None = None,
    ):
        if len(datasets) != plan.num_datasets:
            raise ValueError(
                f"{len(datasets)} datasets given for a plan over {plan.num_datasets} datasets"
            )
        self._datasets = list(datasets)
        self._plan = plan
        self._length = len(plan)
        self._names = [str(n) for n in plan.dataset_names]
        self.options = options
        self.split = split
        self._fingerprint = gpt_source_fingerprint(fingerprint, split, options)
        self._reopen = reopen
        self._lock = threading.Lock()
        self._span_gather: SequenceReader | None = None  # built on first read, per process

    def __getstate__(self) -> dict[str, Any]:
        from jaxblend.loading import grain_workers  # pickled for a Grain worker

        grain_workers.refuse_unguarded_main()
        state = dict(self.__dict__)
        state.pop("_lock")
        state["_span_gather"] = None
        if self._reopen is not None:
            state["_datasets"] = None
            state["_plan"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _gather(self, datasets: list[IndexedDataset]) -> SequenceReader:
        if self._span_gather is None:
            with self._lock:
                if self._span_gather is None:
                    self._span_gather = SpanGather(datasets)
        return self._span_gather

    @property
    def requests_issued(self) -> int:
        """Object-store requests this process has issued for this source (0 for local data)."""
        return 0 if self._span_gather is None else self._span_gather.requests

    @property
    def reads_remote(self) -> bool:
        """Whether any constituent dataset is read from an object store."""
        return any(d.is_remote for d in self._materialize()[0])

    def _materialize(self) -> tuple[list[IndexedDataset], SplitMaps]:
        if self._plan is None:
            with self._lock:
                if self._plan is None:
                    datasets, plan = self._reopen()
                    self._datasets = list(datasets)
                    self._plan = plan
        return self._datasets, self._plan

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(split={self.split!r}, datasets={self._names}, "
            f"fingerprint={self._fingerprint!r})"
        )

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def dataset_names(self) -> list[str]:
        """Names (prefixes) of the constituent datasets, indexed by `dataset_ids`."""
        return list(self._names)

    @property
    def dataset_fingerprints(self) -> dict[str, str]:
        """Content fingerprint of each constituent dataset, by name (as opened: nothing is read
        again)."""
        datasets, _ = self._materialize()
        return {name: d.fingerprint for name, d in zip(self._names, datasets, strict=True)}

    @property
    def plan(self) -> SplitMaps:
        """The split's index maps."""
        return self._materialize()[1]

    def windows(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw token windows of `sample_ids`.

        Returns:
          (int32 `[k, seq_length + extra]` windows padded with -1, int64 `[k]` valid lengths).
        """
        ids = self._check_ids(sample_ids)
        datasets, plan = self._materialize()
        spans = plan.spans(ids)
        dest, n_valid = _destinations(
            np.asarray(spans.row, np.int64), np.asarray(spans.length, np.int64), ids.size
        )
        text = schema.allocate_arrays({"text": ((ids.size, self.options.window_length), np.int32)})["text"]
        text.fill(-1)
        if int(n_valid.max(initial=0)) > self.options.window_length:
            raise ValueError(
                f"the index maps give windows of {int(n_valid.max())} tokens but the source "
                f"expects {self.options.window_length}: seq_length/add_extra_token mismatch"
            )
        row = np.asarray(spans.row, np.int64)
        self._gather(datasets).read(
            np.asarray(spans.dataset, np.int64),
            np.asarray(spans.sequence, np.int64),
            np.asarray(spans.offset, np.int64),
            np.asarray(spans.length, np.int64),
            text.reshape(-1),
            row * self.options.window_length + dest,
        )
        return text, n_valid

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = self._check_ids(sample_ids)
        text, n_valid = self.windows(ids)
        dataset_ids = np.asarray(self.plan.dataset_ids(ids), dtype=np.int32)
        pieces = None
        if self.options.inter_document_masking:  # document boundaries, empty pieces included
            spans = self.plan.spans(ids, keep_empty=True)
            pieces = (spans.row, spans.length)
        return schema.raw_windows(text, n_valid, dataset_ids, ids, pieces)

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return schema.assemble_windows(raw, self.options)

    def get_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        return self.assemble_batch(self.read_batch(sample_ids))


class GPTSource(PlannedSource):
    """One GPT dataset split (a single `.bin`/`.idx` prefix); `dataset_ids` are all 0."""

    def __init__(self, datasets, plan, options, **kwargs):
        super().__init__(datasets, plan, options, **kwargs)
        if len(self._names) != 1:
            raise ValueError(
                f"GPTSource takes one dataset, got {len(self._names)}; use BlendedSource"
            )


class BlendedSource(PlannedSource):
    """A weighted blend of GPT datasets for one split; `dataset_ids` index `dataset_names`."""

"""The Grain data source of a loader: record k = this process's rows of step k, as read."""

from __future__ import annotations

import contextlib
import time

import numpy as np

from jaxblend.loading.protocols import LoaderSource, PaddedLoaderSource
from jaxblend.loading.read_window import ReadWindow
from jaxblend.sampling import ProcessRows
from jaxblend.storage import read_tally

TALLY_KEY = "__jaxblend_read_tally__"
"""The record key of a step's `ReadTally` (`tally=True`); `take_tally` removes it."""


class HostStepSource:
    """Grain data source whose record `k` is this process's rows of step `k` of a plan.

    Rows of unpadded steps are read with `read_batch` (the compact form, in the reader threads or
    workers) and turned into the batch schema by `assemble` in the training process; rows of
    padded (bucketed) steps are read with `get_padded_batch`.

    With a `window` (`ReadWindow`, reads in this process's `ReadPool`, which starts a step's
    read once the window admits it), each read tells the window that it began and how long it
    took.

    With `tally`, each record also carries what reading it cost (a `read_tally.ReadTally` under
    `TALLY_KEY`, taken out by `take_tally`), its requests in flight registered in `pending` (in
    this process only) and `pending.steps` listing the steps being read.

    Args:
      source: the samples.
      process_rows: this process's share of the step plan.
      tally: count each record's reads.
      pending: where requests in flight and steps being read are registered (with `tally`).

    Raises:
      ValueError: if the plan pads steps to a length and the source cannot read padded rows.
    """

    def __init__(
        self,
        source: LoaderSource,
        process_rows: ProcessRows,
        tally: bool = False,
        pending: read_tally.PendingReads | None = None,
    ):
        self.source = source
        self.process_rows = process_rows
        self.tally = tally
        self.pending = pending
        self.window: ReadWindow | None = None  # set by the loader (not sent to worker processes)
        self._padded: PaddedLoaderSource | None = None
        if any(shape.length is not None for shape in process_rows.plan.batch_shapes()):
            if not isinstance(source, PaddedLoaderSource):
                raise ValueError(
                    f"the step plan pads batches to bucket lengths, which needs a source with "
                    f"get_padded_batch (e.g. jaxblend.sources.SequenceSource), not {source!r}"
                )
            self._padded = source

    def __len__(self) -> int:
        return self.process_rows.plan.num_steps

    def __repr__(self) -> str:
        return (
            f"HostStepSource(source={self.source!r}, plan={self.process_rows.plan.fingerprint}, "
            f"process={self.process_rows.process_index})"
        )

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["window"] = None  # in-process threads only
        return state

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        window = self.window
        if window is not None:
            window.begun(step)
        began = time.perf_counter()
        tally = read_tally.ReadTally(pending=self.pending) if self.tally else None
        steps = self.pending.steps if tally is not None and self.pending is not None else None
        if steps is not None:
            steps[step] = began
        try:
            with contextlib.nullcontext() if tally is None else read_tally.collecting(tally):
                record = self._read(step)
        finally:
            if steps is not None:
                steps.pop(step, None)
        if window is not None:
            window.read(time.perf_counter() - began)
        return record if tally is None else {**record, TALLY_KEY: tally}

    @staticmethod
    def take_tally(record: dict) -> read_tally.ReadTally | None:
        """Removes and returns the `ReadTally` a record carries (None without one)."""
        return record.pop(TALLY_KEY, None)

    def _read(self, step: int) -> dict[str, np.ndarray]:
        ids = self.process_rows.sample_ids(step)
        length = self.process_rows.plan.padded_length(step)
        if length is None:
            return self.source.read_batch(ids)
        assert self._padded is not None  # checked in __init__ for every padded shape
        return self._padded.get_padded_batch(ids, length)

    def assemble(self, step: int, record: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Turns record `step` into the host batch (in the training process)."""
        if self.process_rows.plan.padded_length(step) is None:
            return self.source.assemble_batch(record)
        return record

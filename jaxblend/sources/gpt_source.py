"""The GPT source: sample ids -> span index -> one token read -> schema arrays.

`GPTSource` serves one split of a GPT dataset or blend (the same class for both: a single dataset
is a split whose pieces all name dataset 0). `read_batch` asks its `SpanIndex`
(`jaxblend.sources.span_index`) for every piece of every requested sample at once, reads every
piece of every dataset with one `TokenReader.read` (one compiled kernel over memory-mapped files,
one batch of coalesced concurrent requests for object stores) straight into
`[k, seq_length + extra]` windows, and `assemble_batch` builds the schema arrays with one compiled
kernel. Sample windows equal Megatron-Core's (`GPTDataset`/`BlendedDataset`) for the same files,
configuration and seed, whichever span index answers.

Batch assembly plugs in after `windows`: the raw form (`schema.raw_windows`: windows, valid
lengths, dataset ids, sample ids, document pieces) is what a new schema builds on.

Pickling (Grain workers) keeps the span index's recipe, the options and the `DataAccess`, and
drops the token reader: each worker opens the `.bin` files it reads (and, for split maps, re-opens
the datasets and maps, refusing a plan whose fingerprint changed).
"""

from __future__ import annotations

import threading
from typing import Any

import numba
import numpy as np

from jaxblend import access as access_lib
from jaxblend import identity
from jaxblend.sources import base, conversation_masks, packed_schema, schema
from jaxblend.sources.source_identity import gpt_source_fingerprint
from jaxblend.sources.span_index import SpanIndex
from jaxblend.storage.token_reader import TokenReader


@numba.njit(cache=True, nogil=True)
def _destinations(span_row, span_length, num_rows):  # pragma: no cover - compiled
    dest = np.empty(span_row.shape[0], np.int64)
    n_valid = np.zeros(num_rows, np.int64)
    for s in range(span_row.shape[0]):
        r = span_row[s]
        dest[s] = n_valid[r]
        n_valid[r] += span_length[s]
    return dest, n_valid


class GPTSource(base.BatchSource):
    """Samples of one split of a GPT dataset or blend, read in batches.

    Args:
      span_index: where the split's samples are (`SplitMapsSpanIndex`, `RowTableSpanIndex`).
      options: schema options; `seq_length` and `add_extra_token_to_sequence` must match the
        index maps the span index was built from.
      fingerprint: identity of the data plan (`DataMaps.fingerprint`, a publication's plan key).
      split: the split name, for messages, repr and the fingerprint.
      access: how the `.bin` files are read (default: `DataAccess.from_env()`).
      loss_masks: the stored loss masks of the split's datasets (conversations,
        `jaxblend.sources.conversation_masks.find_loss_masks`), or None: `loss_mask` is then
        multiplied by the mask of each target token, and the fingerprint records which datasets
        have masks.
    """

    def __init__(
        self,
        span_index: SpanIndex,
        options: schema.GPTSchemaOptions,
        *,
        fingerprint: str,
        split: str = "train",
        access: access_lib.DataAccess | None = None,
        loss_masks: conversation_masks.LossMasks | None = None,
    ):
        self._index = span_index
        self._length = len(span_index)
        self._names = list(span_index.dataset_names)
        self.options = options
        self.split = split
        self.access = access if access is not None else access_lib.DataAccess.from_env()
        self._fingerprint = gpt_source_fingerprint(fingerprint, split, options)
        self.loss_masks = loss_masks
        if loss_masks is not None:  # the masks change the batches: a stream of its own
            self._fingerprint = identity.fingerprint(
                "gpt_source_loss_masks", 1, source=self._fingerprint, masked=loss_masks.masked,
            )
        self._lock = threading.Lock()
        self._reader: TokenReader | None = None  # built on first read, per process

    def __getstate__(self) -> dict[str, Any]:
        from jaxblend import grain_workers  # pickled for a Grain worker

        grain_workers.refuse_unguarded_main()
        state = dict(self.__dict__)
        state.pop("_lock")
        state["_reader"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(split={self.split!r}, datasets={len(self._names)}, "
            f"fingerprint={self._fingerprint!r})"
        )

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def span_index(self) -> SpanIndex:
        """Where this split's samples are."""
        return self._index

    @property
    def dataset_names(self) -> list[str]:
        """Names (prefixes) of the split's datasets, indexed by `dataset_ids`."""
        return list(self._names)

    @property
    def dataset_fingerprints(self) -> dict[str, str]:
        """Content fingerprint of each dataset, by name (as opened or published: nothing is read
        again)."""
        return self._index.dataset_fingerprints

    @property
    def token_reader(self) -> TokenReader:
        """This process's `.bin` token reader (built on first use)."""
        if self._reader is None:
            with self._lock:
                if self._reader is None:
                    self._reader = TokenReader(self._index.bin_datasets, self.access)
        return self._reader

    @property
    def requests_issued(self) -> int:
        """Object-store requests this process has issued for this source (pieces and tokens)."""
        reader = self._reader
        return self._index.requests + (0 if reader is None else reader.requests)

    @property
    def bytes_read(self) -> int:
        """Object-store bytes this process has read for this source (pieces and tokens; local
        token copies count too)."""
        reader = self._reader
        return self._index.bytes_read + (0 if reader is None else reader.bytes_read)

    @property
    def reads_remote(self) -> bool:
        """Whether pieces or tokens come from an object store."""
        return self._index.reads_remote

    # ---------------------------------------------------------------------------------- reads

    def _read(self, ids: np.ndarray):
        pieces = self._index.pieces(ids)
        dest, n_valid = _destinations(pieces.row, pieces.length, ids.size)
        window = self.options.window_length
        text = schema.allocate_arrays({"text": ((ids.size, window), np.int32)})["text"]
        text.fill(-1)
        if int(n_valid.max(initial=0)) > window:
            raise ValueError(
                f"the span index gives windows of {int(n_valid.max())} tokens but the source "
                f"expects {window}: seq_length/add_extra_token mismatch"
            )
        self.token_reader.read(
            pieces.dataset, pieces.offset, pieces.length, text.reshape(-1),
            pieces.row * window + dest,
        )
        return text, n_valid, pieces

    def windows(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw token windows of `sample_ids`.

        Returns:
          (int32 `[k, seq_length + extra]` windows padded with -1, int64 `[k]` valid lengths).
        """
        text, n_valid, _ = self._read(self._check_ids(sample_ids))
        return text, n_valid

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = self._check_ids(sample_ids)
        text, n_valid, pieces = self._read(ids)
        dataset_ids = np.zeros(ids.size, np.int32)
        dataset_ids[pieces.row[::-1]] = pieces.dataset[::-1]  # each row's first piece
        packed = self.options.packing != "concat"  # packed rows are assembled from their pieces
        masking = (
            (pieces.row, pieces.length)
            if self.options.inter_document_masking or packed
            else None
        )
        raw = schema.raw_windows(text, n_valid, dataset_ids, ids, masking)
        if self.loss_masks is not None:  # the same ranges of the stored loss masks
            dest, _ = _destinations(pieces.row, pieces.length, ids.size)
            raw["loss_weights"] = self.loss_masks.read(
                pieces.dataset, pieces.offset, pieces.length,
                pieces.row * text.shape[1] + dest, text.shape,
            )
        return raw

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.options.packing != "concat":  # packed rows of whole documents
            batch = packed_schema.assemble_packed(raw, self.options)
        else:
            batch = schema.assemble_windows(raw, self.options)
        if "loss_weights" in raw:  # a conversation dataset's stored loss masks
            conversation_masks.apply_loss_masks(batch, np.asarray(raw["loss_weights"]))
        return batch

    def get_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        return self.assemble_batch(self.read_batch(sample_ids))


BlendedSource = GPTSource
"""The public API's name for a blend's source (`jaxblend.BlendedSource`): the same class."""

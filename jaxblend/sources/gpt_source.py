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
lengths, dataset ids, sample ids, document pieces) is what a new schema builds on. A window
transform (`WindowTransform`, e.g. fill-in-the-middle, `jaxblend.sources.fim`) rewrites that raw
form inside `read_batch`, where the reads run (the loader's reader threads or Grain worker
processes).

Pickling (Grain workers) keeps the span index's recipe, the options and the `DataAccess`, and
drops the token reader: each worker opens the `.bin` files it reads (and, for split maps, re-opens
the datasets and maps, refusing a plan whose fingerprint changed).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numba
import numpy as np

from jaxblend import access as access_lib
from jaxblend import identity
from jaxblend.index.packing import PACKINGS
from jaxblend.sources import base, packed_schema, schema
from jaxblend.sources.span_index import SpanIndex
from jaxblend.storage import loss_mask_reader
from jaxblend.storage.token_reader import TokenReader
from jaxblend.validation import require_choice


@numba.njit(cache=True, nogil=True)
def _destinations(span_row, span_length, num_rows, window):  # pragma: no cover - compiled
    # Each piece's position in the flat `[num_rows, window]` text, each row's valid length, and
    # the longest row (more than `window` tokens: the span index was built for another window).
    dest = np.empty(span_row.shape[0], np.int64)
    n_valid = np.zeros(num_rows, np.int64)
    for s in range(span_row.shape[0]):
        r = span_row[s]
        dest[s] = r * window + n_valid[r]
        n_valid[r] += span_length[s]
    longest = 0
    for r in range(num_rows):
        longest = max(longest, n_valid[r])
    return dest, n_valid, longest


def gpt_source_fingerprint(
    data_maps: str,
    split: str,
    options: schema.GPTSchemaOptions,
    seq_length: int,
    add_extra_token_to_sequence: bool,
    transform: dict | None = None,
    packing: str = "concat",
) -> str:
    """Fingerprint of split `split` of the data plan `data_maps` (`DataMaps.fingerprint`), its
    windows of `seq_length` (+ 1) tokens (packed rows with `packing="best_fit"`) read with
    `options` (and a window transform's `identity_fields()`, e.g. FIM's tokenizer).

    The same whichever span index serves the split (index maps + `.idx` pointers, or a published
    row table): both serve the same samples, so a run may resume from one on the other."""
    return identity.fingerprint(
        "gpt_source", 1, data_maps=data_maps, split=split,
        schema=options.identity_fields(seq_length, add_extra_token_to_sequence, packing),
        transform=identity.unless_default(transform, None),
    )


class WindowTransform(Protocol):
    """Rewrites the windows of a batch's raw form (`schema.raw_windows`) before assembly.

    `apply` must be a pure function of the raw form, the split and each row's sample id (never of
    the order in which batches are read), and the transform picklable (Grain workers).
    """

    def apply(self, raw: dict[str, np.ndarray], split: str, megatron_compat: bool) -> dict: ...

    def identity_fields(self) -> dict[str, object]: ...


class GPTSource(base.PerProcess, base.BatchSource):
    """Samples of one split of a GPT dataset or blend, read in batches.

    Args:
      span_index: where the split's samples are (`SplitMapsSpanIndex`, `RowTableSpanIndex`).
      options: schema options (what the arrays of a window hold).
      seq_length: S, tokens per sample: the data configuration's, which the span index was
        built for.
      add_extra_token_to_sequence: windows hold S + 1 tokens (the data configuration's).
      packing: "concat" (windows cut across documents) or "best_fit" (rows of whole documents,
        assembled by `jaxblend.sources.packed_schema.assemble_packed`): the data
        configuration's, which the span index was built for.
      fingerprint: identity of the data plan (`DataMaps.fingerprint`, a publication's plan key).
      split: the split name, for messages, repr and the fingerprint.
      access: how the `.bin` files are read (default: `DataAccess.from_env()`).
      transform: rewrites each batch's windows after they are read (`WindowTransform`; the FIM
        transform of `options.fim`), or None. Its identity enters the fingerprint.
      loss_masks: the stored loss masks of the split's datasets (conversations,
        `jaxblend.storage.loss_mask_reader.find_loss_masks`), or None: `loss_mask` is then
        multiplied by the mask of each target token, and the fingerprint records which datasets
        have masks.
    """

    def __init__(
        self,
        span_index: SpanIndex,
        options: schema.GPTSchemaOptions,
        *,
        seq_length: int,
        add_extra_token_to_sequence: bool = True,
        packing: str = "concat",
        fingerprint: str,
        split: str = "train",
        access: access_lib.DataAccess | None = None,
        transform: WindowTransform | None = None,
        loss_masks: loss_mask_reader.LossMasks | None = None,
    ):
        if (options.fim is None) != (transform is None):
            raise ValueError(
                "GPTSource: schema options with fim need the FIM transform (open_gpt_sources "
                "builds it), and a transform needs options.fim"
            )
        self._index = span_index
        self._length = len(span_index)
        self.options = options
        self.seq_length = int(seq_length)
        self.add_extra_token_to_sequence = bool(add_extra_token_to_sequence)
        self.window_length = schema.window_length(seq_length, add_extra_token_to_sequence)
        require_choice("GPTSource packing", packing, PACKINGS)
        self.packing = packing
        self.split = split
        self.access = access if access is not None else access_lib.DataAccess.from_env()
        self.transform = transform
        self._fingerprint = gpt_source_fingerprint(
            fingerprint, split, options, seq_length, add_extra_token_to_sequence,
            None if transform is None else transform.identity_fields(), packing,
        )
        self.loss_masks = loss_masks
        if loss_masks is not None and transform is not None:
            raise ValueError(
                "fill-in-the-middle (--fim_data) rewrites the tokens that conversation datasets' "
                "stored loss masks are aligned with: leave conversation datasets out of a FIM run"
            )
        if loss_masks is not None:  # the masks change the batches: a stream of its own
            self._fingerprint = identity.fingerprint(
                "gpt_source_loss_masks", 1, source=self._fingerprint, masked=loss_masks.masked,
            )
        self._lock = threading.Lock()
        self._reader: TokenReader | None = None  # built on first read, per process

    PER_PROCESS = ("_reader",)  # each process opens the `.bin` files it reads

    def __getstate__(self) -> dict[str, Any]:
        from jaxblend import grain_workers  # pickled for a Grain worker

        grain_workers.refuse_unguarded_main()
        grain_workers.handed_to_workers()
        return super().__getstate__()

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(split={self.split!r}, datasets={len(self._index.bin_datasets)}, "
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
        """Names (prefixes) of the split's datasets, indexed by `dataset_ids` (asked of the span
        index when needed: a published one reads them on first use)."""
        return self._index.dataset_names

    @property
    def dataset_fingerprints(self) -> dict[str, str]:
        """Content fingerprint of each dataset, by name (as opened or published: nothing is read
        again)."""
        return self._index.dataset_fingerprints

    def dataset_fingerprints_of(self, names: Sequence[str]) -> dict[str, str]:
        """Content fingerprints of the datasets `names` by name (`SpanIndex.fingerprints_of`: a
        published split reads the descriptions of those datasets alone)."""
        return self._index.fingerprints_of(names)

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
        window = self.window_length
        dest, n_valid, longest = _destinations(pieces.row, pieces.length, ids.size, window)
        if longest > window:
            raise ValueError(
                f"the span index gives windows of {longest} tokens but the source "
                f"expects {window}: seq_length/add_extra_token mismatch"
            )
        text = schema.allocate_arrays({"text": ((ids.size, window), np.int32)})["text"]
        text.fill(-1)
        self.token_reader.read(pieces.dataset, pieces.offset, pieces.length, text.reshape(-1), dest)
        return text, n_valid, pieces, dest

    def windows(self, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw token windows of `sample_ids` (the documents' tokens, before any `transform`).

        Returns:
          (int32 `[k, seq_length + extra]` windows padded with -1, int64 `[k]` valid lengths).
        """
        return self._read(self._check_ids(sample_ids))[:2]

    def read_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        ids = self._check_ids(sample_ids)
        text, n_valid, pieces, dest = self._read(ids)
        dataset_ids = np.zeros(ids.size, np.int32)
        dataset_ids[pieces.row[::-1]] = pieces.dataset[::-1]  # each row's first piece
        packed = self.packing != "concat"  # packed rows are assembled from their pieces
        masking = (pieces.row, pieces.length) if self.options.inter_document_masking or packed else None
        raw = schema.raw_windows(text, n_valid, dataset_ids, ids, masking)
        if self.loss_masks is not None:  # the same ranges of the stored loss masks
            raw["loss_weights"] = self.loss_masks.read(
                pieces.dataset, pieces.offset, pieces.length, dest, text.shape,
            )
        if self.transform is not None:
            raw = self.transform.apply(raw, self.split, self.options.megatron_compat)
        return raw

    def assemble_batch(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.packing != "concat":  # packed rows of whole documents
            batch = packed_schema.assemble_packed(raw, self.options, seq_length=self.seq_length)
        else:
            batch = schema.assemble_windows(raw, self.options, seq_length=self.seq_length)
        if "loss_weights" in raw:  # stored loss masks, or FIM's padding inside packed documents
            loss_mask_reader.apply_loss_masks(batch, np.asarray(raw["loss_weights"]))
        return batch

    def get_batch(self, sample_ids: np.ndarray) -> dict[str, np.ndarray]:
        return self.assemble_batch(self.read_batch(sample_ids))


BlendedSource = GPTSource
"""The public API's name for a blend's source (`jaxblend.BlendedSource`): the same class."""

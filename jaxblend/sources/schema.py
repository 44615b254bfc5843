"""GPT batch schema: raw token windows -> `inputs/targets/loss_mask/positions/segment_ids`.

One compiled kernel turns a batch of windows (each `seq_length + extra` tokens, the tail beyond a
row's valid length being padding) into the batch arrays. Two conventions:

jaxblend's own (default):

* `inputs = window[:S]`, `targets = window[1:S + 1]` (with `extra == 0` the last target is padding);
* padding positions hold 0 in `inputs`/`targets`/`positions`, 0 in `loss_mask` and `segment_ids`;
* `loss_mask` is also 0 where the *target* is EOD when `eod_mask_loss` is set, so the model is never
  asked to predict the end of a document (a departure: Megatron masks where the *input* is EOD);
* `positions` restart after every EOD input token when `reset_position_ids`;
* `segment_ids` count documents within the row (1-based) when `reset_attention_mask`, else 1.

Megatron's (`megatron_compat=True`): `inputs/targets/loss_mask/positions` equal Megatron-Core's
`GPTDataset.__getitem__` `tokens/labels/loss_mask/position_ids` for the same window:

* padding is Megatron's pad id (`pad_id`, -1 when None): `loss_mask` is 0 where the *label* equals
  it, then inputs and labels equal to it become 0; without the extra token the last label is padding;
* `loss_mask` is 0 where the *input* is EOD when `eod_mask_loss`;
* `positions` run on through padding (`arange`, restarted after each EOD input when
  `reset_position_ids`);
* `segment_ids` start at 1 and grow after each EOD input when `reset_attention_mask` (padding
  included), so a causal mask restricted to equal `segment_ids` is Megatron's `attention_mask`.

`inter_document_masking` (Megatron-Core >= 0.19's option) adds `cu_seqlens` (`[k, S + 1]`, the
document boundaries of each row, trailing entries = S) and `max_seqlen` (`[k]`); positions restart at
each boundary and `segment_ids` number the documents. Boundaries are the sample's pieces (one per
document part, the extra token removed from the last, padding folded into the last); rows read without
piece information (mock data) use the EOD input tokens as boundaries. In jaxblend's own convention
padding positions keep position and segment 0 (`cu_seqlens` still folds them into the last document).
"""

from __future__ import annotations

import dataclasses
import math

import numba
import numpy as np

from jaxblend import identity
from jaxblend.sources.fim import FIMOptions
from jaxblend.validation import require_int


@dataclasses.dataclass(frozen=True)
class GPTSchemaOptions:
    """How token windows become training arrays.

    The window itself (`seq_length` S and whether it holds an extra token) is a fact of the data:
    it is the data configuration's (`jaxblend.index.GPTDataConfig`), and a source reads it from
    there; these options say only what the arrays made of a window hold.

    Attributes:
      eod_id: the end-of-document token id; required by the three options below.
      eod_mask_loss: zero the loss where the target is EOD.
      reset_position_ids: restart positions after each EOD.
      reset_attention_mask: number documents within a row in `segment_ids`.
      megatron_compat: Megatron-Core's `__getitem__` conventions (see the module docstring).
      pad_id: Megatron's pad token id (the tokenizer's pad id unless it collides with another
        special id; None = -1, no pad token). Only with `megatron_compat`.
      inter_document_masking: also return `cu_seqlens`/`max_seqlen`, positions per document.
      fim: fill-in-the-middle settings (`jaxblend.sources.fim`, Megatron's `--fim-data`): each
        window (with packing, each document of a row, in its own places) is rewritten before
        the arrays are built; None = plain windows.

    Whether rows are windows or packed documents is the data configuration's too (its `packing`,
    which changes the maps): a source takes it from there, and assembles packed rows with
    `jaxblend.sources.packed_schema.assemble_packed`.
    """

    eod_id: int | None = None
    eod_mask_loss: bool = False
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    megatron_compat: bool = False
    pad_id: int | None = None
    inter_document_masking: bool = False
    fim: FIMOptions | None = None

    def __post_init__(self):
        needs_eod = self.eod_mask_loss or self.reset_position_ids or self.reset_attention_mask
        if needs_eod and self.eod_id is None:
            raise ValueError(
                "eod_id is required when eod_mask_loss, reset_position_ids or "
                "reset_attention_mask is set"
            )
        if self.pad_id is not None and not self.megatron_compat:
            raise ValueError("pad_id applies only with megatron_compat (Megatron's padding)")

    def identity_fields(
        self, seq_length: int, add_extra_token_to_sequence: bool, packing: str = "concat"
    ) -> dict[str, object]:
        """What changes the batch made of windows of `seq_length` (+ 1 with the extra token)
        tokens, packed rows with `packing="best_fit"` (the data configuration's facts), with
        these options, as named fingerprint fields (`jaxblend.identity`).

        Listed explicitly: an option added later that does not change the data is left out (or
        passed through `identity.unless_default`), so existing fingerprints and saved loader
        states stay valid. Options added after the first release enter only when not default.
        """
        return {
            "seq_length": int(seq_length),
            "add_extra_token_to_sequence": bool(add_extra_token_to_sequence),
            "eod_id": self.eod_id,
            "eod_mask_loss": self.eod_mask_loss,
            "reset_position_ids": self.reset_position_ids,
            "reset_attention_mask": self.reset_attention_mask,
            "megatron_compat": identity.unless_default(self.megatron_compat, False),
            "pad_id": identity.unless_default(self.pad_id, None),
            "inter_document_masking": identity.unless_default(self.inter_document_masking, False),
            "fim": identity.unless_default(
                None if self.fim is None else self.fim.identity_fields(), None
            ),
            "packing": identity.unless_default(packing, "concat"),
        }


def window_length(seq_length: int, add_extra_token_to_sequence: bool) -> int:
    """Tokens per raw window: S + 1 with the extra token, else S (S > 0).

    Raises:
      ValueError: `seq_length` <= 0.
    """
    require_int("seq_length", seq_length, 1)
    return int(seq_length) + int(bool(add_extra_token_to_sequence))


@numba.njit(cache=True, nogil=True)
def _fill_schema(
    text, n_valid, seq_length, eod, eod_mask_loss, reset_positions, reset_segments,
    inputs, targets, loss_mask, positions, segment_ids,
):  # pragma: no cover - compiled
    # Branch-free slice loops per row (vectorized by LLVM); EOD scans only when an option needs them.
    for r in range(text.shape[0]):
        n_in = min(max(n_valid[r], 0), seq_length)  # real input positions
        n_tg = min(max(n_valid[r] - 1, 0), seq_length)  # real target positions
        for p in range(n_in):
            inputs[r, p] = text[r, p]
        for p in range(n_tg):
            targets[r, p] = text[r, p + 1]
            loss_mask[r, p] = 1.0
        if eod_mask_loss:
            for p in range(n_tg):
                if targets[r, p] == eod:
                    loss_mask[r, p] = 0.0
        if reset_positions or reset_segments:
            pos = 0
            seg = 1
            for p in range(n_in):
                positions[r, p] = pos
                segment_ids[r, p] = seg
                pos += 1
                if inputs[r, p] == eod:
                    if reset_positions:
                        pos = 0
                    if reset_segments:
                        seg += 1
        else:
            for p in range(n_in):
                positions[r, p] = p
                segment_ids[r, p] = 1
        for p in range(n_in, seq_length):
            inputs[r, p] = 0
            positions[r, p] = 0
            segment_ids[r, p] = 0
        for p in range(n_tg, seq_length):
            targets[r, p] = 0
            loss_mask[r, p] = 0.0


@numba.njit(cache=True, nogil=True)
def _fill_megatron(
    text, n_valid, seq_length, extra, eod, pad, eod_mask_loss, reset_positions, reset_segments,
    inputs, targets, loss_mask, positions, segment_ids,
):  # pragma: no cover - compiled
    # Megatron-Core's GPTDataset.__getitem__ per row: the window padded with `pad`, tokens/labels
    # shifted by one, masks computed on the padded tokens, then pad ids replaced by 0.
    for r in range(text.shape[0]):
        n = n_valid[r]
        pos = 0
        seg = 1
        for p in range(seq_length):
            tok = text[r, p] if p < n else pad
            if extra or p + 1 < seq_length:
                lab = text[r, p + 1] if p + 1 < n else pad
            else:
                lab = pad
            m = 1.0
            if eod_mask_loss and tok == eod:
                m = 0.0
            if lab == pad:
                m = 0.0
            loss_mask[r, p] = m
            inputs[r, p] = 0 if tok == pad else tok
            targets[r, p] = 0 if lab == pad else lab
            positions[r, p] = pos if reset_positions else p
            segment_ids[r, p] = seg
            pos += 1
            if tok == eod:
                if reset_positions:
                    pos = 0
                if reset_segments:
                    seg += 1


@numba.njit(cache=True, nogil=True)
def _document_boundaries(
    piece_row, piece_length, n_valid, text, eod, use_pieces, seq_length, extra,
    cu_seqlens, max_seqlen, positions, segment_ids,
):  # pragma: no cover - compiled
    # Megatron's inter_document_masking: per-row document lengths (pieces, the extra token taken
    # off the last and dropped if that empties it, padding folded into the last), cumulated.
    k = cu_seqlens.shape[0]
    lengths = np.zeros(seq_length + 2, np.int64)
    start = 0
    for r in range(k):
        m = 0
        if use_pieces:
            while start < piece_row.shape[0] and piece_row[start] == r:
                lengths[m] = piece_length[start]
                m += 1
                start += 1
        else:
            last = 0
            n = min(n_valid[r], seq_length + extra)
            for p in range(n):
                if text[r, p] == eod:
                    lengths[m] = p + 1 - last
                    m += 1
                    last = p + 1
            if n > last:
                lengths[m] = n - last
                m += 1
        if extra and m > 0:
            lengths[m - 1] -= 1
            if lengths[m - 1] == 0:
                m -= 1
        total = 0
        for j in range(m):
            total += lengths[j]
        if total < seq_length:
            if m > 0:
                lengths[m - 1] += seq_length - total
            else:
                lengths[0] = seq_length - total
                m = 1
        cu_seqlens[r, 0] = 0
        best = 0
        acc = 0
        for j in range(m):
            for p in range(acc, acc + lengths[j]):
                positions[r, p] = p - acc
                segment_ids[r, p] = j + 1
            acc += lengths[j]
            cu_seqlens[r, j + 1] = acc
            best = max(best, lengths[j])
        for j in range(m + 1, seq_length + 1):
            cu_seqlens[r, j] = seq_length
        max_seqlen[r] = best


def allocate_arrays(specs: dict[str, tuple[tuple[int, ...], type]]) -> dict[str, np.ndarray]:
    """Uninitialized arrays carved from one allocation.

    Why: a batch's arrays are several MB each; allocated one by one they come from fresh
    `mmap`s and every first touch of a 4 KiB page faults (measured: 4.8 ms for five 2 MB arrays
    vs 0.2 ms for one 10 MB block, which numpy backs with transparent huge pages). The views keep
    the block alive as long as any of them is referenced.
    """
    layout = []
    total = 0
    for name, (shape, dtype) in specs.items():
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        layout.append((name, shape, dtype, total, nbytes))
        total += -(-nbytes // 64) * 64  # 64-byte aligned views
    block = np.empty(total, np.uint8)
    return {
        name: block[start : start + nbytes].view(dtype).reshape(shape)
        for name, shape, dtype, start, nbytes in layout
    }


def allocate_batch(k: int, seq_length: int, inter_document_masking: bool) -> dict[str, np.ndarray]:
    """The uninitialized schema arrays of `k` rows of `seq_length` (`allocate_arrays`): `inputs`,
    `targets` (int32), `loss_mask` (float32), `positions`, `segment_ids` (int32), each
    `[k, seq_length]`; with `inter_document_masking` also `cu_seqlens` (int32
    `[k, seq_length + 1]`) and `max_seqlen` (int32 `[k]`)."""
    specs = {
        "inputs": ((k, seq_length), np.int32),
        "targets": ((k, seq_length), np.int32),
        "loss_mask": ((k, seq_length), np.float32),
        "positions": ((k, seq_length), np.int32),
        "segment_ids": ((k, seq_length), np.int32),
    }
    if inter_document_masking:
        specs["cu_seqlens"] = ((k, seq_length + 1), np.int32)
        specs["max_seqlen"] = ((k,), np.int32)
    return allocate_arrays(specs)


def windows_to_batch(
    text: np.ndarray,
    n_valid: np.ndarray,
    options: GPTSchemaOptions,
    pieces: tuple[np.ndarray, np.ndarray] | None = None,
    *,
    seq_length: int,
) -> dict[str, np.ndarray]:
    """Builds the schema arrays for a batch of windows.

    Args:
      text: int32 `[k, seq_length + extra]` token windows (values past `n_valid[r]` are
        ignored); the extra token is there when the width is `seq_length + 1`.
      n_valid: int64 `[k]` number of real tokens in each window.
      options: the schema options.
      pieces: `(row, length)` of every piece of every window in order, empty pieces included
        (document boundaries for `inter_document_masking`; None = boundaries after each EOD).
      seq_length: S, the data configuration's sequence length.

    Returns:
      dict with `inputs`, `targets` (int32), `loss_mask` (float32), `positions`, `segment_ids`
      (int32), each `[k, seq_length]`; with `inter_document_masking` also `cu_seqlens` (int32
      `[k, seq_length + 1]`) and `max_seqlen` (int32 `[k]`).

    Raises:
      ValueError: windows neither S nor S + 1 tokens wide.
    """
    k, s = text.shape[0], int(seq_length)
    extra = text.shape[1] - s
    if s <= 0 or extra not in (0, 1):
        raise ValueError(
            f"windows of {text.shape[1]} tokens for seq_length={seq_length}: expected "
            f"{seq_length} or {seq_length + 1} (with the extra token)"
        )
    out = allocate_batch(k, s, options.inter_document_masking)
    eod = -1 if options.eod_id is None else int(options.eod_id)
    n_valid = n_valid.astype(np.int64, copy=False)
    if options.megatron_compat:
        pad = -1 if options.pad_id is None else int(options.pad_id)
        _fill_megatron(
            text, n_valid, s, extra, eod, pad,
            options.eod_mask_loss, options.reset_position_ids, options.reset_attention_mask,
            out["inputs"], out["targets"], out["loss_mask"], out["positions"], out["segment_ids"],
        )
    else:
        _fill_schema(
            text, n_valid, s, eod, options.eod_mask_loss,
            options.reset_position_ids, options.reset_attention_mask,
            out["inputs"], out["targets"], out["loss_mask"], out["positions"], out["segment_ids"],
        )
    if options.inter_document_masking:
        if pieces is None:
            row = length = np.zeros(0, np.int64)
        else:
            row, length = (np.asarray(a, np.int64) for a in pieces)
        _document_boundaries(
            row, length, n_valid, text, eod, pieces is not None, s, extra,
            out["cu_seqlens"], out["max_seqlen"], out["positions"], out["segment_ids"],
        )
        if not options.megatron_compat:  # jaxblend's convention: padding has position/segment 0
            pad = np.arange(s)[None, :] >= np.minimum(n_valid, s)[:, None]
            out["positions"][pad] = 0
            out["segment_ids"][pad] = 0
    return out


def raw_windows(
    text: np.ndarray,
    n_valid: np.ndarray,
    dataset_ids: np.ndarray,
    sample_ids: np.ndarray,
    pieces: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """The compact raw form of a GPT batch (what crosses from a Grain worker).

    `pieces` (`(row, length)` of every piece, see `windows_to_batch`) is carried only when given.
    """
    raw = {"text": text, "n_valid": n_valid, "dataset_ids": dataset_ids, "sample_ids": sample_ids}
    if pieces is not None:
        raw["piece_row"], raw["piece_length"] = pieces
    return raw


def assemble_windows(
    raw: dict[str, np.ndarray], options: GPTSchemaOptions, *, seq_length: int
) -> dict[str, np.ndarray]:
    """Raw GPT form (`raw_windows`) of windows for `seq_length` -> the batch schema (packed
    rows: `jaxblend.sources.packed_schema.assemble_packed`)."""
    pieces = (raw["piece_row"], raw["piece_length"]) if "piece_row" in raw else None
    batch = windows_to_batch(
        np.asarray(raw["text"]), np.asarray(raw["n_valid"]), options, pieces,
        seq_length=seq_length,
    )
    return with_ids(batch, raw)


def with_ids(batch: dict[str, np.ndarray], raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`batch` with the raw form's `dataset_ids` (int32) and `sample_ids` (int64, a copy)."""
    batch["dataset_ids"] = np.asarray(raw["dataset_ids"], np.int32)
    batch["sample_ids"] = np.array(raw["sample_ids"], np.int64)
    return batch

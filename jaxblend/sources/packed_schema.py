"""The batch schema of packed rows (`--packing=best_fit`): documents side by side, never mixed.

A packed row's window holds whole documents (its pieces, in order: `piece_row`/`piece_length` of
the raw form) then padding (-1 past `n_valid`). The arrays follow the GPT schema
(`jaxblend.sources.schema`), with the documents of a row kept apart whatever the schema options:

* `inputs = window[:S]`; `targets[p] = window[p + 1]` only when position p + 1 holds the same
  document: a document's last token has no target (target 0, `loss_mask` 0), so a row never asks
  for the next document's first token. Every document of L tokens in a row gives exactly its
  L - 1 (input, target) pairs: with the extra token the row holds `S + 1` tokens and its last
  token is only a target of its own document (a document of one token in that last slot gives
  none); without it the row holds S tokens. A document longer than a row is cut into row-sized
  pieces, each its own document here (the pair across a cut is not trained).
* `positions` restart at 0 at each document, `segment_ids` number the documents of the row
  from 1 (always: packed rows need them, `reset_position_ids`/`reset_attention_mask` are implied);
* `loss_mask` is 0 on padding, on each document's last token, and, with `eod_mask_loss`, where
  the target is EOD (jaxblend's convention) or the input is EOD (`megatron_compat`);
* padding: inputs, targets, loss 0; positions and `segment_ids` 0 in jaxblend's convention; with
  `megatron_compat` padding is folded into the row's last document (positions run on, its
  segment id), as Megatron-Core's `cu_seqlens` does;
* `inter_document_masking` adds `cu_seqlens` (`[k, S + 1]`: each document's first input
  position, then S, trailing entries S; padding folded into the last document) and `max_seqlen`.
"""

from __future__ import annotations

import numba
import numpy as np

from jaxblend.sources import schema


@numba.njit(cache=True, nogil=True)
def _fill_packed(
    text, n_valid, piece_row, piece_length, seq_length, eod, eod_mask_loss, mask_eod_input,
    fold_padding, want_cu, inputs, targets, loss_mask, positions, segment_ids, cu_seqlens,
    max_seqlen,
):  # pragma: no cover - compiled
    # Whole-row loops first, then each document's positions, segment and the target of its last
    # token, then padding. Loops run over views from index 0: a loop from a variable start would
    # check each index for wraparound and not vectorize.
    k = text.shape[0]
    piece = 0
    for r in range(k):
        n = min(max(n_valid[r], 0), text.shape[1])
        real = min(n, seq_length)  # real input positions
        real_tg = min(max(n - 1, 0), seq_length)  # positions with a next token in the row
        for p in range(real):
            inputs[r, p] = text[r, p]
        for p in range(real_tg):
            targets[r, p] = text[r, p + 1]
        for p in range(real_tg):
            loss_mask[r, p] = 1.0
        tail_t = targets[r, real_tg:]
        tail_l = loss_mask[r, real_tg:]
        for p in range(tail_t.shape[0]):
            tail_t[p] = 0
        for p in range(tail_l.shape[0]):
            tail_l[p] = 0.0
        a = 0  # first token of the current document in the window
        seg = 0
        m = 0  # documents starting at an input position
        last_a = 0
        longest = 0
        while piece < piece_row.shape[0] and piece_row[piece] == r:
            size = piece_length[piece]
            piece += 1
            if size <= 0:
                continue
            end = a + size
            if a < seq_length:
                seg += 1
                last_a = a
                if want_cu:
                    cu_seqlens[r, m] = a
                m += 1
                stop = min(end, seq_length)
                doc_p = positions[r, a:stop]
                doc_s = segment_ids[r, a:stop]
                for p in range(doc_p.shape[0]):
                    doc_p[p] = p
                for p in range(doc_s.shape[0]):
                    doc_s[p] = seg
                if end - 1 < seq_length:  # the document's last token: no target in it
                    targets[r, end - 1] = 0
                    loss_mask[r, end - 1] = 0.0
                longest = max(longest, stop - a)
            a = end
        if eod_mask_loss:
            for p in range(real_tg):
                tok = inputs[r, p] if mask_eod_input else targets[r, p]
                if tok == eod and loss_mask[r, p] != 0.0:
                    loss_mask[r, p] = 0.0
        pad_i = inputs[r, real:]
        pad_p = positions[r, real:]
        pad_s = segment_ids[r, real:]
        for p in range(pad_i.shape[0]):
            pad_i[p] = 0
        if fold_padding and m > 0:
            for p in range(pad_p.shape[0]):
                pad_p[p] = real - last_a + p
            for p in range(pad_s.shape[0]):
                pad_s[p] = seg
        else:
            for p in range(pad_p.shape[0]):
                pad_p[p] = 0
            for p in range(pad_s.shape[0]):
                pad_s[p] = 0
        if want_cu:
            if m == 0:
                cu_seqlens[r, 0] = 0
                m = 1
            for j in range(m, seq_length + 1):
                cu_seqlens[r, j] = seq_length
            longest = max(longest, seq_length - cu_seqlens[r, m - 1])
            max_seqlen[r] = longest


def assemble_packed(
    raw: dict[str, np.ndarray], options: schema.GPTSchemaOptions, *, seq_length: int
) -> dict[str, np.ndarray]:
    """Raw GPT form of packed rows (`schema.raw_windows` with their pieces: every document piece
    of every window, row order then piece order) -> the batch schema of `seq_length` S (see the
    module docstring; the arrays of `schema.windows_to_batch`).

    Raises:
      ValueError: a raw batch without pieces (only sources of packed maps have them).
    """
    if "piece_row" not in raw:
        raise ValueError(
            "packed rows (packing='best_fit') are assembled from their document pieces; this raw "
            "batch has none (mock data cannot be packed)"
        )
    text = np.asarray(raw["text"])
    k, s = text.shape[0], int(seq_length)
    want_cu = bool(options.inter_document_masking)
    out = schema.allocate_batch(k, s, want_cu)
    cu = out["cu_seqlens"] if want_cu else np.zeros((0, 0), np.int32)
    longest = out["max_seqlen"] if want_cu else np.zeros(0, np.int32)
    row, length = (np.ascontiguousarray(raw[f], np.int64) for f in ("piece_row", "piece_length"))
    _fill_packed(
        text, np.asarray(raw["n_valid"], np.int64), row, length, s,
        -1 if options.eod_id is None else int(options.eod_id), bool(options.eod_mask_loss),
        bool(options.megatron_compat), bool(options.megatron_compat), want_cu,
        out["inputs"], out["targets"], out["loss_mask"], out["positions"], out["segment_ids"],
        cu, longest,
    )
    return schema.with_ids(out, raw)

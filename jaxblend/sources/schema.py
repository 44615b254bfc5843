"""GPT batch schema: raw token windows -> `inputs/targets/loss_mask/positions/segment_ids`.

One compiled kernel turns a batch of windows (each `seq_length + extra` tokens, the tail beyond a
row's valid length being padding) into the arrays of DESIGN.md's batch schema:

* `inputs = window[:S]`, `targets = window[1:S + 1]` (with `extra == 0` the last target is padding);
* padding positions hold 0 in `inputs`/`targets`, 0 in `loss_mask` and `segment_ids`;
* `loss_mask` is also 0 where the *target* is EOD when `eod_mask_loss` is set (SPEC.md §4; note that
  Megatron-Core's GPTDataset masks where the *input* is EOD instead);
* `positions` restart after every EOD input token when `reset_position_ids`;
* `segment_ids` count documents within the row (1-based) when `reset_attention_mask`, else 1.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

GPT_KEYS = ("inputs", "targets", "loss_mask", "positions", "segment_ids", "dataset_ids", "sample_ids")


@dataclasses.dataclass(frozen=True)
class GPTSchemaOptions:
    """How token windows become training arrays.

    Attributes:
      seq_length: S, the model's sequence length (> 0).
      add_extra_token_to_sequence: windows hold S + 1 tokens (Megatron's default) so targets are
        the next tokens; with False they hold S tokens and the last target is padding.
      eod_id: the end-of-document token id; required by the three options below.
      eod_mask_loss: zero the loss where the target is EOD.
      reset_position_ids: restart positions after each EOD.
      reset_attention_mask: number documents within a row in `segment_ids`.
    """

    seq_length: int
    add_extra_token_to_sequence: bool = True
    eod_id: int | None = None
    eod_mask_loss: bool = False
    reset_position_ids: bool = False
    reset_attention_mask: bool = False

    def __post_init__(self):
        if self.seq_length <= 0:
            raise ValueError(f"seq_length must be > 0, got {self.seq_length}")
        needs_eod = self.eod_mask_loss or self.reset_position_ids or self.reset_attention_mask
        if needs_eod and self.eod_id is None:
            raise ValueError(
                "eod_id is required when eod_mask_loss, reset_position_ids or "
                "reset_attention_mask is set"
            )

    @property
    def window_length(self) -> int:
        """Tokens per raw window: S + 1 with the extra token, else S."""
        return self.seq_length + int(self.add_extra_token_to_sequence)


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
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        layout.append((name, shape, dtype, total, nbytes))
        total += -(-nbytes // 64) * 64  # 64-byte aligned views
    block = np.empty(total, np.uint8)
    return {
        name: block[start : start + nbytes].view(dtype).reshape(shape)
        for name, shape, dtype, start, nbytes in layout
    }


def windows_to_batch(
    text: np.ndarray, n_valid: np.ndarray, options: GPTSchemaOptions
) -> dict[str, np.ndarray]:
    """Builds the schema arrays for a batch of windows.

    Args:
      text: int32 `[k, window_length]` token windows (values past `n_valid[r]` are ignored).
      n_valid: int64 `[k]` number of real tokens in each window.
      options: the schema options.

    Returns:
      dict with `inputs`, `targets` (int32), `loss_mask` (float32), `positions`, `segment_ids`
      (int32), each `[k, seq_length]`.
    """
    k, s = text.shape[0], options.seq_length
    out = allocate_arrays(
        {
            "inputs": ((k, s), np.int32),
            "targets": ((k, s), np.int32),
            "loss_mask": ((k, s), np.float32),
            "positions": ((k, s), np.int32),
            "segment_ids": ((k, s), np.int32),
        }
    )
    eod = -1 if options.eod_id is None else int(options.eod_id)
    _fill_schema(
        text, n_valid.astype(np.int64, copy=False), s, eod, options.eod_mask_loss,
        options.reset_position_ids, options.reset_attention_mask,
        out["inputs"], out["targets"], out["loss_mask"], out["positions"], out["segment_ids"],
    )
    return out


def raw_windows(
    text: np.ndarray, n_valid: np.ndarray, dataset_ids: np.ndarray, sample_ids: np.ndarray
) -> dict[str, np.ndarray]:
    """The compact raw form of a GPT batch (what crosses from a Grain worker)."""
    return {"text": text, "n_valid": n_valid, "dataset_ids": dataset_ids, "sample_ids": sample_ids}


def assemble_windows(raw: dict[str, np.ndarray], options: GPTSchemaOptions) -> dict[str, np.ndarray]:
    """Raw GPT form (`raw_windows`) -> the batch schema."""
    batch = windows_to_batch(np.asarray(raw["text"]), np.asarray(raw["n_valid"]), options)
    batch["dataset_ids"] = np.asarray(raw["dataset_ids"], np.int32)
    batch["sample_ids"] = np.array(raw["sample_ids"], np.int64)
    return batch

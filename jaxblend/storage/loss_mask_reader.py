"""Stored loss masks of conversation datasets, read beside their tokens and applied to a batch.

A dataset written by ``preprocess --chat`` has a loss-mask dataset (`jaxblend.loss_masks`): one
``uint8`` per token, 1 on assistant tokens. Item t of the mask's ``.bin`` belongs to token t of
the data's ``.bin``, so the pieces a span index gives for a batch, as (dataset, token offset,
length, destination), are read from the masks unchanged, through the same `TokenReader`.

* `find_loss_masks(datasets, access)` finds the masks of a split's datasets (None when no dataset
  has one: plain text and data made by Megatron-LM train on every token, as before);
* `LossMasks.read` gives ``uint8 [k, window]`` per batch: the stored mask on a conversation
  dataset's tokens, 1 on the tokens of a dataset without masks, 0 on padding;
* `apply_loss_masks` multiplies the batch's ``loss_mask`` by the weight of each position's target
  token (``targets[p]`` is window position ``p + 1``): the loss counts where the model predicts an
  assistant token, and stays 0 wherever the schema already made it 0 (padding, a document's last
  token in packed rows, EOD with ``eod_mask_loss``). So ``loss_mask`` = stored mask x not padding.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Sequence

import numba
import numpy as np

from jaxblend import access as access_lib
from jaxblend.loss_masks import loss_mask_prefix
from jaxblend.storage.token_reader import BinDataset, TokenReader
from jaxblend.urls import is_url


@numba.njit(cache=True, nogil=True)
def _fill_ones(flat, pos, length):  # pragma: no cover - compiled
    for j in range(pos.shape[0]):
        for t in range(pos[j], pos[j] + length[j]):
            flat[t] = 1


class LossMasks:
    """The loss masks of a split's datasets (thread-safe, picklable).

    Args:
      masks: per dataset of the split (in its order), its mask's `BinDataset`, or None (every
        token trained).
      access: how the masks are read.
    """

    def __init__(
        self, masks: Sequence[BinDataset | None], access: access_lib.DataAccess
    ) -> None:
        self.masks = tuple(masks)
        self.access = access
        present = [j for j, m in enumerate(self.masks) if m is not None]
        self._slot = np.full(len(self.masks), -1, np.int64)  # dataset -> its mask's reader slot
        self._slot[present] = np.arange(len(present))
        self._present = [self.masks[j] for j in present]
        self._lock = threading.Lock()
        self._reader: TokenReader | None = None

    def __reduce__(self):  # pickled as its arguments: each process opens its own
        return type(self), (self.masks, self.access)

    @property
    def masked(self) -> list[bool]:
        """Which datasets of the split have a mask (what the source's fingerprint records)."""
        return [m is not None for m in self.masks]

    @property
    def reader(self) -> TokenReader:
        """This process's reader of the masks' `.bin` files (built on first use)."""
        if self._reader is None:
            with self._lock:
                if self._reader is None:
                    self._reader = TokenReader(self._present, self.access)
        return self._reader

    def read(self, dataset: np.ndarray, offset: np.ndarray, length: np.ndarray,
             out_pos: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """The weights of a batch's windows: ``uint8 [k, window]``.

        Args:
          dataset, offset, length, out_pos: the token ranges the batch's windows were read from
            (as given to `TokenReader.read`; ``out_pos`` flat in the ``[k, window]`` array).
          shape: ``(k, window)``.
        """
        out = np.zeros(shape, np.uint8)
        flat = out.reshape(-1)
        dataset, offset, length, out_pos = (
            np.ascontiguousarray(a, np.int64) for a in (dataset, offset, length, out_pos)
        )
        slot = self._slot[dataset]
        plain = slot < 0
        if plain.any():
            _fill_ones(flat, out_pos[plain], length[plain])
        if not plain.all():
            masked = ~plain
            self.reader.read(slot[masked], offset[masked], length[masked], flat, out_pos[masked])
        return out


def apply_loss_masks(batch: dict[str, np.ndarray], weights: np.ndarray) -> None:
    """Multiplies ``batch["loss_mask"]`` (``[k, S]``) by the weight of each target's window
    position (``p + 1``), in place; a target past the window has weight 0."""
    loss = batch["loss_mask"]
    n = min(loss.shape[1], weights.shape[1] - 1)
    np.multiply(loss[:, :n], weights[:, 1 : n + 1], out=loss[:, :n], casting="unsafe")
    loss[:, n:] = 0


def _mask_of(ds: BinDataset, access: access_lib.DataAccess) -> BinDataset | None:
    """The mask `.bin` of ``ds`` as a `BinDataset` (one byte per token of ``ds``), or None when
    there is none. Only the mask's `.bin` is looked at (a host reading from a published row
    table opens no `.idx`): a local file by its size, an object by reading its last byte.

    Raises:
      ValueError: a mask whose size is not one byte per token of ``ds`` (names both).
    """
    from jaxblend.storage.object_store import location as _location
    from jaxblend.storage.object_store import requests as _remote

    prefix = loss_mask_prefix(ds.prefix)
    store = access.object_store
    loc = _location.resolve(prefix, store)
    wrong = ValueError(
        f"loss mask {prefix}.bin is not one byte per token of {ds.prefix} ({ds.num_tokens} "
        "tokens): run preprocess --chat again for both"
    )
    if loc.local_prefix is not None:
        try:
            size = os.path.getsize(loc.local_prefix + ".bin")
        except FileNotFoundError:
            return None
        if size != ds.num_tokens:
            raise wrong
    else:
        kv = _location.open_kvstore(loc.kvstore, _location.shared_context())
        last = max(ds.num_tokens - 1, 0)
        res = _remote.wait(_remote.read(kv, loc.bin_key, slice(last, last + 1)), prefix + ".bin",
                           "looking for the loss mask", store.request_timeout)
        if res.state != "value":
            return None
        if len(res.value) != min(ds.num_tokens, 1):
            raise wrong
    return BinDataset(prefix, "|u1", ds.num_tokens)


def find_loss_masks(
    datasets: Sequence[BinDataset], access: access_lib.DataAccess
) -> LossMasks | None:
    """The loss masks of ``datasets`` (`jaxblend.loss_masks.loss_mask_prefix` of each), or None
    when none has one. Bucket datasets are looked up concurrently, one small read each.

    Raises:
      ValueError: a mask that is not one byte per token of its dataset (one line naming both).
    """
    remote = sum(is_url(d.prefix) for d in datasets)
    if remote > 1:
        with concurrent.futures.ThreadPoolExecutor(min(32, len(datasets))) as pool:
            found = list(pool.map(lambda d: _mask_of(d, access), datasets))
    else:
        found = [_mask_of(d, access) for d in datasets]
    if all(m is None for m in found):
        return None
    return LossMasks(found, access)

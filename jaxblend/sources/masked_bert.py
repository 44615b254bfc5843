"""BERT masked-LM samples with optional sentence-order prediction (`BERTSource`).

Sample i's sentences (row i of the split's sample index) are cut at a sentence boundary into
segments A and B, swapped with probability 1/2 (sentence-order prediction), trimmed to the target
length one token at a time from a random end of the longer segment, wrapped as
`[CLS] A [SEP] B [SEP]` and masked (`_masking.mask_ngrams`; 80% [MASK], 10% random, 10% unchanged).
Shared behaviour and the deviations from Megatron-Core: `jaxblend.sources.masked_base`.

Batch keys (B rows, S = `sequence_length`):

| key | dtype, shape | meaning |
|---|---|---|
| `tokens` | int32 [B, S] | `[CLS] A [SEP] B [SEP]`, masked, then `pad` ids |
| `types` | int32 [B, S] | 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`, 0 on padding |
| `labels` | int32 [B, S] | original token where `loss_mask` is 1, else -1 |
| `loss_mask` | float32 [B, S] | 1 at predicted (masked or permuted) positions |
| `padding_mask` | int32 [B, S] | 1 on real tokens, 0 on padding |
| `sop_label` | int32 [B] | 1 if segments A and B were swapped (sentence-order prediction) |
| `sample_ids` | int64 [B] | sample index |
"""

from __future__ import annotations

import numpy as np

from jaxblend.sources import _masking
from jaxblend.sources.masked_base import MaskedSource
from jaxblend.sources.masked_config import BERTMaskedConfig


class BERTSource(MaskedSource):
    """BERT masked-LM samples with optional sentence-order prediction (see the module docstring).

    Takes `MaskedSource`'s arguments with a `BERTMaskedConfig`; the tokenizer info must hold cls,
    sep, mask and pad. With `classification_head`, documents of one sentence are skipped (a
    sample needs two segments).
    """

    config_type = BERTMaskedConfig
    config: BERTMaskedConfig

    def _replace(self, original: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """80% [MASK], 10% a uniformly random id, 10% unchanged."""
        u = rng.random(original.size)
        random_ids = rng.integers(0, self.tokenizer.vocab_size, original.size)
        return np.where(u < 0.8, self.tokenizer.mask, np.where(u < 0.9, random_ids, original))

    def get_batch(self, sample_ids) -> dict[str, np.ndarray]:
        ids = self._check_ids(sample_ids)
        k, s = ids.size, self.config.sequence_length
        tok = self.tokenizer
        out = {
            "tokens": np.full((k, s), tok.pad, np.int32),
            "types": np.zeros((k, s), np.int32),
            "labels": np.full((k, s), -1, np.int32),
            "loss_mask": np.zeros((k, s), np.float32),
            "padding_mask": np.zeros((k, s), np.int32),
            "sop_label": np.zeros(k, np.int32),
            "sample_ids": ids.copy(),
        }
        for r, (sid, sentences) in enumerate(zip(ids.tolist(), self._read_sentences(ids))):
            target = int(self.sample_index[sid, 2])
            rng = self._generator(sid)
            tokens, types, swapped = self._segments(sentences, target, rng)
            special = (tokens == tok.cls) | (tokens == tok.sep)
            special[0] = True
            pred = _masking.mask_ngrams(
                tokens, special, target, self.config, tok.is_continuation, rng, self._replace
            )
            n = tokens.size
            out["tokens"][r, :n] = pred.tokens
            out["types"][r, :n] = types
            out["labels"][r, pred.positions] = pred.labels
            out["loss_mask"][r, pred.positions] = 1.0
            out["padding_mask"][r, :n] = 1
            out["sop_label"][r] = swapped
        return out

    def _segments(
        self, sentences: list[np.ndarray], target: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Splits at a sentence boundary, maybe swaps, trims to `target`, adds [CLS]/[SEP]."""
        pivot = len(sentences)
        swapped = 0
        if self.config.classification_head:
            pivot = 1 if len(sentences) < 3 else int(rng.integers(1, len(sentences)))
            swapped = int(rng.random() < 0.5)
        a = np.concatenate(sentences[:pivot])
        b = np.concatenate(sentences[pivot:]) if pivot < len(sentences) else np.zeros(0, np.int64)
        if swapped:
            a, b = b, a
        a_lo, a_hi, b_lo, b_hi = 0, a.size, 0, b.size
        excess = a.size + b.size - target
        if excess > 0:
            fronts = rng.random(excess) < 0.5
            for front in fronts.tolist():  # trim the longer segment, one token from a random end
                if a_hi - a_lo > b_hi - b_lo:
                    if front:
                        a_lo += 1
                    else:
                        a_hi -= 1
                elif front:
                    b_lo += 1
                else:
                    b_hi -= 1
        a, b = a[a_lo:a_hi], b[b_lo:b_hi]
        tok = self.tokenizer
        parts = [[tok.cls], a, [tok.sep]]
        types = [np.zeros(a.size + 2, np.int32)]
        if b.size:
            parts += [b, [tok.sep]]
            types.append(np.ones(b.size + 1, np.int32))
        return np.concatenate(parts).astype(np.int64), np.concatenate(types), swapped

"""T5 span-corruption samples (`T5Source`).

Sample i's sentences (row i of the split's sample index), cut to the target length, are masked
(`_masking.mask_ngrams`, never more spans than the decoder holds); the encoder sees the text with
each masked span replaced by one sentinel, the decoder predicts the sentinels and their spans.
Shared behaviour and the deviations from Megatron-Core: `jaxblend.sources.masked_base`.

Batch keys (B rows, E = `sequence_length` = encoder length, D = `sequence_length_decoder`):

| key | dtype, shape | meaning |
|---|---|---|
| `encoder_tokens` | int32 [B, E] | text with each masked span replaced by one sentinel, then pad |
| `decoder_tokens` | int32 [B, D] | `[BOS] s0 span0 s1 span1 ...`, then pad |
| `labels` | int32 [B, D] | `s0 span0 s1 span1 ... [EOS]`, then -1 |
| `loss_mask` | float32 [B, D] | 1 on the decoder's real positions |
| `encoder_padding_mask` | int32 [B, E] | 1 on real encoder tokens |
| `decoder_padding_mask` | int32 [B, D] | 1 on real decoder tokens |
| `sample_ids` | int64 [B] | sample index |
"""

from __future__ import annotations

import numpy as np

from jaxblend.sources import _masking
from jaxblend.sources.masked_base import MaskedSource
from jaxblend.sources.masked_config import T5MaskedConfig


class T5Source(MaskedSource):
    """T5 span-corruption samples (see the module docstring).

    Takes `MaskedSource`'s arguments with a `T5MaskedConfig`. The tokenizer info must hold bos and
    eos and at least as many sentinel ids as a sample can have spans
    (`int(masking_probability * (sequence_length - 2))`); otherwise construction raises
    ValueError.
    """

    config_type = T5MaskedConfig
    config: T5MaskedConfig

    def _check_tokenizer(self) -> None:
        tok, cfg = self.tokenizer, self.config
        if tok.bos is None or tok.eos is None:
            raise ValueError("T5Source needs MaskedTokenizerInfo.bos and .eos")
        most_spans = int(cfg.masking_probability * (cfg.sequence_length - cfg.special_tokens))
        if len(tok.sentinel_ids) < max(1, most_spans):
            raise ValueError(
                f"T5Source needs at least {max(1, most_spans)} sentinel ids for "
                f"masking_probability={cfg.masking_probability} and sequence_length="
                f"{cfg.sequence_length}; MaskedTokenizerInfo.sentinel_ids has {len(tok.sentinel_ids)}"
            )

    def _replace(self, original: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.full(original.size, self.tokenizer.mask, np.int64)

    def get_batch(self, sample_ids) -> dict[str, np.ndarray]:
        ids = self._check_ids(sample_ids)
        k, e, d = ids.size, self.config.sequence_length, self.config.sequence_length_decoder
        tok = self.tokenizer
        out = {
            "encoder_tokens": np.full((k, e), tok.pad, np.int32),
            "decoder_tokens": np.full((k, d), tok.pad, np.int32),
            "labels": np.full((k, d), -1, np.int32),
            "loss_mask": np.zeros((k, d), np.float32),
            "encoder_padding_mask": np.zeros((k, e), np.int32),
            "decoder_padding_mask": np.zeros((k, d), np.int32),
            "sample_ids": ids.copy(),
        }
        sentinels = np.asarray(tok.sentinel_ids, dtype=np.int64)
        for r, (sid, sentences) in enumerate(zip(ids.tolist(), self._read_sentences(ids))):
            target = int(self.sample_index[sid, 2])
            rng = self._generator(sid)
            tokens = np.concatenate(sentences)[:target]
            pred = _masking.mask_ngrams(
                tokens,
                np.zeros(tokens.size, bool),
                target,
                self.config,
                tok.is_continuation,
                rng,
                self._replace,
                decoder_limit=d,
            )
            keep = np.ones(tokens.size, dtype=bool)
            enc_parts, dec_parts = [], []
            prev = 0
            for j, span in enumerate(pred.spans):
                keep[span] = False
                enc_parts += [pred.tokens[prev : span[0]], sentinels[j : j + 1]]
                dec_parts += [sentinels[j : j + 1], tokens[span]]
                prev = int(span[-1]) + 1
            enc_parts.append(pred.tokens[prev:])
            encoder = np.concatenate(enc_parts)
            body = np.concatenate(dec_parts) if dec_parts else np.zeros(0, np.int64)
            decoder = np.concatenate([[tok.bos], body])
            labels = np.concatenate([body, [tok.eos]])
            out["encoder_tokens"][r, : encoder.size] = encoder
            out["encoder_padding_mask"][r, : encoder.size] = 1
            out["decoder_tokens"][r, : decoder.size] = decoder
            out["decoder_padding_mask"][r, : decoder.size] = 1
            out["labels"][r, : labels.size] = labels
            out["loss_mask"][r, : labels.size] = 1.0
        return out

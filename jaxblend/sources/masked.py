"""Masked-LM sources: BERT (masked LM + sentence order) and T5 (span corruption) samples.

Built, as Megatron-Core's masked WordPiece datasets are, from an `IndexedDataset` whose documents
are several sequences (sentences), split by *documents* (`split="969,30,1"`, the split rule of
docs/format.md, 'Splits', applied to the document count). A sample packs consecutive sentences
of one document up to a target length (`jaxblend.sources._masking.build_sample_index`; see
docs/format.md, 'BERT/T5 sample index'), then masks it (`_masking.mask_ngrams`).

Determinism: sample i uses `np.random.default_rng([random_seed, i])` alone (NumPy PCG64 seeded by
the pair), so any sample can be recomputed in isolation on any host, in any order. Statistics
match Megatron-Core's (tests/sources/test_masked_stats.py) but not its bits: Megatron draws from
`RandomState(seed + i)` and a C++ Mersenne Twister.

BERT batch keys (B rows, S = `sequence_length`):

| key | dtype, shape | meaning |
|---|---|---|
| `tokens` | int32 [B, S] | `[CLS] A [SEP] B [SEP]`, masked, then `pad` ids |
| `types` | int32 [B, S] | 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`, 0 on padding |
| `labels` | int32 [B, S] | original token where `loss_mask` is 1, else -1 |
| `loss_mask` | float32 [B, S] | 1 at predicted (masked or permuted) positions |
| `padding_mask` | int32 [B, S] | 1 on real tokens, 0 on padding |
| `sop_label` | int32 [B] | 1 if segments A and B were swapped (sentence-order prediction) |
| `sample_ids` | int64 [B] | sample index |

T5 batch keys (E = `sequence_length` = encoder length, D = `sequence_length_decoder`):

| key | dtype, shape | meaning |
|---|---|---|
| `encoder_tokens` | int32 [B, E] | text with each masked span replaced by one sentinel, then pad |
| `decoder_tokens` | int32 [B, D] | `[BOS] s0 span0 s1 span1 ...`, then pad |
| `labels` | int32 [B, D] | `s0 span0 s1 span1 ... [EOS]`, then -1 |
| `loss_mask` | float32 [B, D] | 1 on the decoder's real positions |
| `encoder_padding_mask` | int32 [B, E] | 1 on real encoder tokens |
| `decoder_padding_mask` | int32 [B, D] | 1 on real decoder tokens |
| `sample_ids` | int64 [B] | sample index |

Deviations from Megatron-Core, on purpose: documents with a sentence longer than 512 tokens are
kept (they are truncated like any other); T5 skips an n-gram that would overflow the decoder length
instead of failing the sample; pad positions hold `pad` (not 0) and labels -1 (not 0 at pad ids);
the permutation pass draws from the sample's generator (Megatron uses the global NumPy RNG there).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxblend.index import split as split_lib
from jaxblend.sources import _masking, base
from jaxblend.storage import IndexedDataset

_SPLITS = split_lib.SPLIT_NAMES


def _check_probability(
    owner: str, name: str, value: float, *, low_open: bool, high_open: bool
) -> None:
    lo_ok = value > 0 if low_open else value >= 0
    hi_ok = value < 1 if high_open else value <= 1
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (lo_ok and hi_ok):
        rng = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"{owner}.{name} must be in {rng}, got {value!r}")


def _check_int(owner: str, name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{owner}.{name} must be an integer >= {low}, got {value!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class MaskedTokenizerInfo:
    """The special token ids a masked source needs (no tokenizer object, no downloads).

    Attributes:
      vocab_size: V; random replacements are drawn uniformly from `[0, V)`.
      cls: BERT's [CLS] id.
      sep: BERT's [SEP] id.
      mask: the [MASK] id.
      pad: the padding id.
      bos: T5 decoder start id (None for BERT-only use).
      eos: T5 decoder end id (None for BERT-only use).
      sentinel_ids: T5 sentinel ids, used in order (one per masked span).
      is_continuation: bool[V], True for WordPiece continuation pieces ("##..."), used by
        whole-word masking; None = every token starts a word.
    """

    vocab_size: int
    cls: int
    sep: int
    mask: int
    pad: int
    bos: int | None = None
    eos: int | None = None
    sentinel_ids: tuple[int, ...] = ()
    is_continuation: np.ndarray | None = None

    def __post_init__(self):
        _check_int("MaskedTokenizerInfo", "vocab_size", self.vocab_size, 2)
        for name in ("cls", "sep", "mask", "pad", "bos", "eos"):
            value = getattr(self, name)
            if value is None and name in ("bos", "eos"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, np.integer))
                or not 0 <= value < self.vocab_size
            ):
                raise ValueError(
                    f"MaskedTokenizerInfo.{name} must be a token id in [0, {self.vocab_size}), got {value!r}"
                )
        sentinels = tuple(int(s) for s in self.sentinel_ids)
        if any(not 0 <= s < self.vocab_size for s in sentinels):
            raise ValueError(f"MaskedTokenizerInfo.sentinel_ids must be in [0, {self.vocab_size})")
        object.__setattr__(self, "sentinel_ids", sentinels)
        if self.is_continuation is not None:
            cont = np.asarray(self.is_continuation, dtype=bool).reshape(-1)
            if cont.size != self.vocab_size:
                raise ValueError(
                    f"MaskedTokenizerInfo.is_continuation must have vocab_size={self.vocab_size} "
                    f"entries, got {cont.size}"
                )
            cont.setflags(write=False)
            object.__setattr__(self, "is_continuation", cont)

    @staticmethod
    def from_vocab(vocab: Sequence[str], **special: Any) -> MaskedTokenizerInfo:
        """Builds the info from a WordPiece vocabulary list (pieces starting with "##" continue a word).

        Args:
          vocab: the token strings, index = id.
          **special: the other fields (cls, sep, mask, pad, ...).
        """
        cont = np.fromiter((t.startswith("##") for t in vocab), dtype=bool, count=len(vocab))
        return MaskedTokenizerInfo(vocab_size=len(vocab), is_continuation=cont, **special)

    def identity(self) -> str:
        """A stable text identity (part of a source's fingerprint)."""
        cont = (
            "none"
            if self.is_continuation is None
            else hashlib.sha256(np.packbits(self.is_continuation).tobytes()).hexdigest()[:16]
        )
        return (
            f"V={self.vocab_size},cls={self.cls},sep={self.sep},mask={self.mask},pad={self.pad},"
            f"bos={self.bos},eos={self.eos},sentinels={self.sentinel_ids},cont={cont}"
        )


@dataclasses.dataclass(frozen=True)
class MaskedConfig:
    """Fields shared by the masked datasets (names as in Megatron-Core's MaskedWordPieceDatasetConfig).

    Attributes:
      random_seed: seed of the sample index and of every sample's generator.
      sequence_length: tokens per sample (BERT), or the encoder length (T5).
      split: split string over *documents*, e.g. "969,30,1".
      masking_probability: fraction of tokens to mask, in (0, 1).
      short_sequence_probability: probability of a shorter target length, in [0, 1].
      masking_max_ngram: longest n-gram (in words) masked at once, >= 1.
      masking_do_full_word: mask whole words (WordPiece pieces stay with their word).
      masking_do_permutation: additionally permute some n-grams (not with the geometric option).
      masking_use_longer_ngrams: n-gram size probabilities ∝ 1/(max+1-n) instead of ∝ 1/n.
      masking_use_geometric_distribution: n-gram sizes from Geometric(0.2) clipped to the max
        (SpanBERT); overrides masking_use_longer_ngrams.
      num_samples: None = one pass over the split's documents; else whole passes until at least
        this many samples exist.
    """

    random_seed: int
    sequence_length: int
    split: str = "969,30,1"
    masking_probability: float = 0.15
    short_sequence_probability: float = 0.1
    masking_max_ngram: int = 3
    masking_do_full_word: bool = True
    masking_do_permutation: bool = False
    masking_use_longer_ngrams: bool = False
    masking_use_geometric_distribution: bool = False
    num_samples: int | None = None

    def __post_init__(self):
        owner = type(self).__name__
        _check_int(owner, "random_seed", self.random_seed, 0)
        _check_int(owner, "sequence_length", self.sequence_length, 5)
        _check_probability(
            owner, "masking_probability", self.masking_probability, low_open=True, high_open=True
        )
        _check_probability(
            owner,
            "short_sequence_probability",
            self.short_sequence_probability,
            low_open=False,
            high_open=False,
        )
        _check_int(owner, "masking_max_ngram", self.masking_max_ngram, 1)
        if self.masking_use_geometric_distribution and self.masking_do_permutation:
            raise ValueError(
                f"{owner}: masking_use_geometric_distribution and masking_do_permutation cannot "
                "both be True"
            )
        if self.num_samples is not None:
            _check_int(owner, "num_samples", self.num_samples, 1)
        split_lib.parse_split(self.split)

    def masking_options(self) -> _masking.MaskingOptions:
        """The masking knobs as `_masking.MaskingOptions`."""
        return _masking.MaskingOptions(
            masking_probability=float(self.masking_probability),
            masking_max_ngram=int(self.masking_max_ngram),
            masking_do_full_word=bool(self.masking_do_full_word),
            masking_do_permutation=bool(self.masking_do_permutation),
            masking_use_longer_ngrams=bool(self.masking_use_longer_ngrams),
            masking_use_geometric_distribution=bool(self.masking_use_geometric_distribution),
        )


@dataclasses.dataclass(frozen=True)
class BERTMaskedConfig(MaskedConfig):
    """BERT config; `classification_head` turns on sentence-order prediction (two segments)."""

    classification_head: bool = True


@dataclasses.dataclass(frozen=True)
class T5MaskedConfig(MaskedConfig):
    """T5 config; `sequence_length` is the encoder length (Megatron's `sequence_length_encoder`)."""

    sequence_length_decoder: int = 128

    def __post_init__(self):
        super().__post_init__()
        _check_int(type(self).__name__, "sequence_length_decoder", self.sequence_length_decoder, 3)

    @property
    def sequence_length_encoder(self) -> int:
        """Alias of `sequence_length`, as in Megatron-Core."""
        return self.sequence_length


class _MaskedSource(base.BatchSource):
    """Shared machinery: split, sample index, one batched read per batch."""

    _SPECIAL_TOKENS = 0  # tokens added around the text (subtracted from the target length)
    _MIN_SENTENCES = 1

    def __init__(
        self,
        dataset: IndexedDataset | str | os.PathLike,
        config: MaskedConfig,
        tokenizer: MaskedTokenizerInfo,
        split: str = "train",
    ):
        if split not in _SPLITS:
            raise ValueError(f"split must be one of {_SPLITS}, got {split!r}")
        if not isinstance(dataset, IndexedDataset):
            dataset = IndexedDataset(dataset)
        self.dataset = dataset
        self.config = config
        self.tokenizer = tokenizer
        self.split = split
        self._check_tokenizer()
        bookend = split_lib.split_matrix(split_lib.parse_split(config.split))[_SPLITS.index(split)]
        if bookend is None:
            raise ValueError(f"split {split!r} is empty under split string {config.split!r}")
        docs = split_lib.split_indices(bookend, dataset.num_documents)
        if docs.size == 0:
            raise ValueError(
                f"split {split!r} of {dataset.prefix} has no documents ({dataset.num_documents} "
                f"documents, split {config.split!r})"
            )
        bounds = np.asarray(dataset.document_indices[docs[0] : docs[-1] + 2], dtype=np.int64)
        self.sample_index = _masking.build_sample_index(
            bounds,
            dataset.sequence_lengths,
            config.sequence_length - self._SPECIAL_TOKENS,
            config.short_sequence_probability,
            self._min_sentences(),
            config.random_seed,
            config.num_samples,
        )
        if self.sample_index.shape[0] == 0:
            raise ValueError(
                f"split {split!r} of {dataset.prefix} yields no samples: no document has "
                f"{self._min_sentences()} or more sentences"
            )
        self._options = config.masking_options()
        self._fingerprint: str | None = None

    def _check_tokenizer(self) -> None:
        pass

    def _min_sentences(self) -> int:
        return self._MIN_SENTENCES

    def __len__(self) -> int:
        return int(self.sample_index.shape[0])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(dataset={self.dataset!r}, split={self.split!r}, "
            f"config={self.config!r}, samples={len(self)})"
        )

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            text = (
                f"{type(self).__name__}|{self.dataset.fingerprint}|{self.split}|{self.config!r}|"
                f"{self.tokenizer.identity()}"
            )
            self._fingerprint = hashlib.sha256(text.encode()).hexdigest()[:32]
        return self._fingerprint

    def _read_sentences(self, ids: np.ndarray) -> list[list[np.ndarray]]:
        """Sentences of each sample, read with one batched storage call."""
        rows = self.sample_index[ids]
        counts = rows[:, 1] - rows[:, 0]
        sentence_ids = (
            np.concatenate([np.arange(b, e, dtype=np.int64) for b, e in rows[:, :2]])
            if ids.size
            else np.zeros(0, np.int64)
        )
        lengths = np.asarray(self.dataset.sequence_lengths[sentence_ids], dtype=np.int64)
        starts = np.asarray(self.dataset.sequence_pointers[sentence_ids], dtype=np.int64) // (
            self.dataset.dtype.itemsize
        )
        flat = self.dataset.read_token_spans(starts, lengths).astype(np.int64)
        pieces = np.split(flat, np.cumsum(lengths)[:-1]) if lengths.size else []
        out = []
        at = 0
        for c in counts.tolist():
            out.append(pieces[at : at + c])
            at += c
        return out

    def _generator(self, sample_id: int) -> np.random.Generator:
        return np.random.default_rng([int(self.config.random_seed), int(sample_id)])


class BERTSource(_MaskedSource):
    """BERT masked-LM samples with optional sentence-order prediction (see the module docstring).

    Args:
      dataset: an `IndexedDataset` (or its prefix) of sentence-split documents.
      config: a `BERTMaskedConfig`.
      tokenizer: special ids (cls, sep, mask, pad, vocab size, continuation pieces).
      split: "train", "valid" or "test".

    Raises:
      TypeError: if `config` is not a `BERTMaskedConfig`.
      ValueError: if the split is empty or no document has enough sentences (2 with
        `classification_head`).
    """

    _SPECIAL_TOKENS = 3  # [CLS] A [SEP] B [SEP]
    config: BERTMaskedConfig

    def __init__(
        self,
        dataset: IndexedDataset | str | os.PathLike,
        config: BERTMaskedConfig,
        tokenizer: MaskedTokenizerInfo,
        split: str = "train",
    ):
        if not isinstance(config, BERTMaskedConfig):
            raise TypeError(f"BERTSource needs a BERTMaskedConfig, got {type(config).__name__}")
        super().__init__(dataset, config, tokenizer, split)

    def _min_sentences(self) -> int:
        return 2 if self.config.classification_head else 1

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
                tokens, special, target, self._options, tok.is_continuation, rng, self._replace
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


class T5Source(_MaskedSource):
    """T5 span-corruption samples (see the module docstring).

    Args:
      dataset: an `IndexedDataset` (or its prefix) of sentence-split documents.
      config: a `T5MaskedConfig`.
      tokenizer: special ids (mask, pad, bos, eos, sentinel ids, vocab size, continuation pieces).
      split: "train", "valid" or "test".

    Raises:
      TypeError: if `config` is not a `T5MaskedConfig`.
      ValueError: if the split is empty, if bos/eos are missing or there are fewer sentinels than the most spans a sample
        can have (`int(masking_probability * (sequence_length - 2))`).
    """

    _SPECIAL_TOKENS = 2  # reserved as in Megatron-Core
    config: T5MaskedConfig

    def __init__(
        self,
        dataset: IndexedDataset | str | os.PathLike,
        config: T5MaskedConfig,
        tokenizer: MaskedTokenizerInfo,
        split: str = "train",
    ):
        if not isinstance(config, T5MaskedConfig):
            raise TypeError(f"T5Source needs a T5MaskedConfig, got {type(config).__name__}")
        super().__init__(dataset, config, tokenizer, split)

    def _check_tokenizer(self) -> None:
        tok, cfg = self.tokenizer, self.config
        if tok.bos is None or tok.eos is None:
            raise ValueError("T5Source needs MaskedTokenizerInfo.bos and .eos")
        most_spans = int(cfg.masking_probability * (cfg.sequence_length - self._SPECIAL_TOKENS))
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
                self._options,
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

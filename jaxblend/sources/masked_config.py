"""Configuration of the masked-LM sources: the special token ids and the masking/packing knobs.

`MaskedTokenizerInfo` holds the token ids a masked source needs (no tokenizer object). The configs
mirror Megatron-Core's `MaskedWordPieceDatasetConfig` fields; `MaskedConfig.index_config` derives
the sample-index configuration (`jaxblend.index.MaskedIndexConfig`) from them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from jaxblend.index import masked_maps
from jaxblend.index import split as split_lib
from jaxblend.validation import require_int, require_probability


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
        require_int("MaskedTokenizerInfo.vocab_size", self.vocab_size, 2)
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

    def identity_fields(self) -> dict[str, object]:
        """The token ids as named fingerprint fields (`jaxblend.identity`) of a source."""
        cont = (
            None if self.is_continuation is None else np.packbits(self.is_continuation).tobytes().hex()
        )
        return {
            "vocab_size": self.vocab_size, "cls": self.cls, "sep": self.sep, "mask": self.mask,
            "pad": self.pad, "bos": self.bos, "eos": self.eos, "sentinel_ids": self.sentinel_ids,
            "is_continuation": cont,
        }


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

    Where the sample index is cached is not configuration: it is the `DataAccess` given to the
    source (`access.maps`).
    """

    special_tokens: ClassVar[int] = 0  # tokens added around the text (not in the target length)

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
        require_int(f"{owner}.random_seed", self.random_seed, 0)
        require_int(f"{owner}.sequence_length", self.sequence_length, 5)
        require_probability(f"{owner}.masking_probability", self.masking_probability, True)
        require_probability(f"{owner}.short_sequence_probability", self.short_sequence_probability)
        require_int(f"{owner}.masking_max_ngram", self.masking_max_ngram, 1)
        if self.masking_use_geometric_distribution and self.masking_do_permutation:
            raise ValueError(
                f"{owner}: masking_use_geometric_distribution and masking_do_permutation cannot "
                "both be True"
            )
        if self.num_samples is not None:
            require_int(f"{owner}.num_samples", self.num_samples, 1)
        split_lib.parse_split(self.split)

    @property
    def min_sentences(self) -> int:
        """Sentences a sample holds at least (documents with fewer are skipped)."""
        return 1

    def index_config(self) -> masked_maps.MaskedIndexConfig:
        """The configuration of the sample index (`jaxblend.index.build_masked_index`)."""
        return masked_maps.MaskedIndexConfig(
            split=self.split,
            seed=int(self.random_seed),
            max_length=int(self.sequence_length) - self.special_tokens,
            short_sequence_probability=float(self.short_sequence_probability),
            min_sentences=self.min_sentences,
            num_samples=self.num_samples,
        )

    def identity_fields(self) -> dict[str, object]:
        """The fields that change samples, as named fingerprint fields (`jaxblend.identity`).

        Listed explicitly (not `cache_dir`, nor any later option that leaves samples unchanged),
        so adding such an option keeps every source fingerprint.
        """
        return {
            "random_seed": self.random_seed,
            "sequence_length": self.sequence_length,
            "split": self.split,
            "masking_probability": self.masking_probability,
            "short_sequence_probability": self.short_sequence_probability,
            "masking_max_ngram": self.masking_max_ngram,
            "masking_do_full_word": self.masking_do_full_word,
            "masking_do_permutation": self.masking_do_permutation,
            "masking_use_longer_ngrams": self.masking_use_longer_ngrams,
            "masking_use_geometric_distribution": self.masking_use_geometric_distribution,
            "num_samples": self.num_samples,
        }


@dataclasses.dataclass(frozen=True)
class BERTMaskedConfig(MaskedConfig):
    """BERT config; `classification_head` turns on sentence-order prediction (two segments)."""

    special_tokens: ClassVar[int] = 3  # [CLS] A [SEP] B [SEP]
    classification_head: bool = True

    @property
    def min_sentences(self) -> int:
        """2 with sentence-order prediction (two segments), else 1."""
        return 2 if self.classification_head else 1

    def identity_fields(self) -> dict[str, object]:
        return {**super().identity_fields(), "classification_head": self.classification_head}


@dataclasses.dataclass(frozen=True)
class T5MaskedConfig(MaskedConfig):
    """T5 config; `sequence_length` is the encoder length (Megatron's `sequence_length_encoder`)."""

    special_tokens: ClassVar[int] = 2  # reserved as in Megatron-Core
    sequence_length_decoder: int = 128

    def __post_init__(self):
        super().__post_init__()
        require_int(f"{type(self).__name__}.sequence_length_decoder", self.sequence_length_decoder, 3)

    def identity_fields(self) -> dict[str, object]:
        return {**super().identity_fields(), "sequence_length_decoder": self.sequence_length_decoder}

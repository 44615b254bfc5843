"""The cleaning stage's settings: one frozen, validated dataclass, part of the run's identity."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from typing import Any

from jaxblend.preprocess.cleaning import quality


@dataclasses.dataclass(frozen=True)
class CleaningConfig:
    """What the cleaning stage does before tokenization (all off by default).

    Steps run in this order on every record that passes validation: PII scrubbing, quality filters,
    language filter, decontamination, exact deduplication, near-duplicate removal.

    Attributes:
      pii: Replace e-mail and IP addresses by placeholders (:mod:`.pii`).
      pii_public_ips_only: Replace only globally routable IP addresses (datatrove's default).
      quality: Enabled quality filters (``("all",)`` or names of :data:`.quality.FILTER_NAMES`).
      quality_thresholds: Bound overrides, ``{"word_count.min": 20.0, ...}``.
      lang_model: Path of a fastText language-ID model (e.g. ``lid.176.bin``); never downloaded.
      languages: Keep documents whose top label is one of these (e.g. ``("en",)``).
      lang_min_score: ...and whose probability is at least this.
      decontaminate: Evaluation files (``.jsonl`` with ``decontam_key``, other files: a line per
        text); documents sharing a word ``decontam_ngram``-gram with any of them are dropped.
      decontam_ngram: n-gram length in words (normalized: case-folded, punctuation removed).
      decontam_key: Field of JSON-lines evaluation files.
      exact_dedup: Drop documents whose normalized text equals an earlier one's (across all inputs).
      near_dedup: Drop documents whose MinHash/LSH similarity to an earlier one reaches
        ``near_threshold``.
      shingle: Word n-gram size of the MinHash shingles.
      num_perm: MinHash permutations (``bands * rows``).
      bands: LSH bands; rows per band = ``num_perm // bands``.
      near_threshold: Estimated Jaccard similarity (from the signatures) a candidate pair must reach.
      seed: MinHash seed (the same seed gives the same permutations and the same output).
      join_memory_mb: Memory budget of the duplicate join; above it the join works in hash shards.
      plot: Write the quality-score distribution PNG beside the report (needs matplotlib).
    """

    pii: bool = False
    pii_public_ips_only: bool = True
    quality: tuple[str, ...] = ()
    quality_thresholds: tuple[tuple[str, float], ...] = ()
    lang_model: str | None = None
    languages: tuple[str, ...] = ()
    lang_min_score: float = 0.65
    decontaminate: tuple[str, ...] = ()
    decontam_ngram: int = 13
    decontam_key: str = "text"
    exact_dedup: bool = False
    near_dedup: bool = False
    shingle: int = 5
    num_perm: int = 112
    bands: int = 14
    near_threshold: float = 0.8
    seed: int = 1
    join_memory_mb: int = 1024
    plot: bool = True

    def __post_init__(self) -> None:
        for name in ("quality", "languages", "decontaminate"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        thresholds = self.quality_thresholds  # a dict, or (name, bound) pairs
        pairs = sorted(thresholds.items()) if isinstance(thresholds, dict) else thresholds
        object.__setattr__(self, "quality_thresholds", tuple((str(k), float(v)) for k, v in pairs))
        self.filters()  # validates names and overrides
        if self.languages and not self.lang_model:
            raise ValueError(
                "--clean_languages needs --clean_lang_model=PATH, the path of a fastText "
                "language-ID model file (e.g. lid.176.bin from fasttext.cc); nothing is downloaded"
            )
        if self.lang_model:
            if not os.path.isfile(self.lang_model):
                raise ValueError(
                    f"--clean_lang_model={self.lang_model}: no such file; pass the path of a "
                    "fastText language-ID model (e.g. lid.176.bin); jaxblend downloads nothing"
                )
            if not self.languages:
                raise ValueError("--clean_lang_model needs --clean_languages (e.g. en,fr)")
        if not 0.0 <= self.lang_min_score <= 1.0:
            raise ValueError(f"--clean_lang_min_score={self.lang_min_score} must be in [0, 1]")
        for path in self.decontaminate:
            if not os.path.isfile(path):
                raise ValueError(f"--clean_decontaminate: evaluation file {path!r} does not exist")
        if self.decontam_ngram < 1:
            raise ValueError(f"--clean_decontam_ngram={self.decontam_ngram} must be >= 1")
        if self.shingle < 1:
            raise ValueError(f"--clean_shingle={self.shingle} must be >= 1")
        if self.bands < 1 or self.num_perm < self.bands or self.num_perm % self.bands:
            raise ValueError(
                f"--clean_num_perm={self.num_perm} must be a positive multiple of "
                f"--clean_bands={self.bands}"
            )
        if not 0.0 < self.near_threshold <= 1.0:
            raise ValueError(f"--clean_near_threshold={self.near_threshold} must be in (0, 1]")
        if self.near_dedup and importlib.util.find_spec("datasketch") is None:
            raise ValueError("--clean_near_dedup needs datasketch: pip install 'jaxblend[clean]'")
        if self.join_memory_mb < 1:
            raise ValueError(f"--clean_join_memory_mb={self.join_memory_mb} must be >= 1")

    @property
    def rows(self) -> int:
        """MinHash values per LSH band."""
        return self.num_perm // self.bands

    @property
    def lsh_threshold(self) -> float:
        """The usual approximation ``(1/bands)^(1/rows)`` of the similarity where the LSH candidate
        probability ``1 - (1 - s^rows)^bands`` rises steepest."""
        return (1.0 / self.bands) ** (1.0 / self.rows)

    @property
    def enabled(self) -> bool:
        """Whether any step is on."""
        steps = (self.pii, self.quality, self.lang_model, self.decontaminate, self.needs_join)
        return any(steps)

    @property
    def needs_join(self) -> bool:
        """Whether a first pass over all partitions is needed (deduplication)."""
        return self.exact_dedup or self.near_dedup

    def filters(self) -> tuple[quality.Filter, ...]:
        """The enabled quality filters with their bounds."""
        return quality.select(self.quality, dict(self.quality_thresholds))

    def identity(self) -> dict[str, Any]:
        """The settings that determine the output (stored in the run manifest)."""
        out = dataclasses.asdict(self)
        out.pop("plot")
        out.pop("join_memory_mb")  # the join's result does not depend on its sharding
        out["decontaminate"] = [
            {"path": os.path.abspath(p), "size": os.path.getsize(p)} for p in self.decontaminate
        ]
        if self.lang_model:
            out["lang_model"] = {
                "path": os.path.abspath(self.lang_model),
                "size": os.path.getsize(self.lang_model),
            }
        return json.loads(json.dumps(out))  # as stored in the manifest (tuples become lists)

"""Applies the per-record cleaning steps in a worker, and the join's duplicate decisions.

:class:`Cleaner` is created once per partition. For every record that passed validation,
:meth:`Cleaner.clean` scrubs PII from every key's text, runs the quality filters, the language
filter and decontamination on the record's text (:func:`.text.record_text`), then (in the
tokenizing pass) drops the positions the duplicate join chose. It returns the cleaned values or the
drop reason; it also keeps what the report needs (PII replacements, score histograms, kept bytes).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxblend.preprocess.cleaning import decontam, join, langid, pii, quality
from jaxblend.preprocess.cleaning import text as text_lib
from jaxblend.preprocess.cleaning.config import CleaningConfig

LANGUAGE = "language"
CONTAMINATED = "contaminated"
EXACT_DUPLICATE = "exact_duplicate"
NEAR_DUPLICATE = "near_duplicate"
QUALITY_PREFIX = "quality_"
REASONS = (
    *(QUALITY_PREFIX + n for n in quality.FILTER_NAMES),
    LANGUAGE,
    CONTAMINATED,
    EXACT_DUPLICATE,
    NEAR_DUPLICATE,
)
_JOIN_REASONS = {join.EXACT: EXACT_DUPLICATE, join.NEAR: NEAR_DUPLICATE}

Values = Mapping[str, "str | Sequence[str]"]

@functools.cache
def _loaded(make: Callable[..., Any], *args: Any) -> Any:
    """``make(*args)``, made once per process."""
    return make(*args)


class Cleaner:
    """The cleaning steps of one partition (see the module docstring).

    Args:
      config: Cleaning settings.
      duplicates: position -> join reason of this partition's duplicates (tokenizing pass), or
        None (signature pass, or no deduplication).
      decided: The signature pass's per-record outcome (:meth:`decisions`), reused by the
        tokenizing pass instead of computing the filters again: position -> drop reason, and the
        score histograms.
    """

    def __init__(
        self,
        config: CleaningConfig,
        duplicates: Mapping[int, int] | None,
        decided: tuple[Mapping[int, str], Mapping[str, Sequence[int]]] | None = None,
    ) -> None:
        self.config = config
        self.duplicates = duplicates
        self.decided = decided
        self.filtered: list[tuple[int, str]] = []  # (position, reason) of the per-record filters
        self.scrubber = pii.Scrubber(config.pii_public_ips_only) if config.pii else None
        self.filters = config.filters()
        c = config  # the evaluation n-grams and language model are loaded once per process
        self.eval_set = (
            _loaded(decontam.EvalSet, c.decontaminate, c.decontam_ngram, c.decontam_key)
            if c.decontaminate
            else None
        )
        self.lang = (
            _loaded(langid.LanguageFilter, c.lang_model, c.languages, c.lang_min_score)
            if c.lang_model
            else None
        )
        self.pii_counts = pii.PIICounts()
        self.pii_documents = 0
        self.histograms = {f.name: np.zeros(len(f.bins) + 1, np.int64) for f in self.filters}
        if decided is not None:
            for name, h in decided[1].items():
                self.histograms[name] += np.asarray(h, np.int64)
        self.kept_documents = 0
        self.kept_bytes = 0

    def _scrub(self, values: Values) -> dict[str, Any]:
        assert self.scrubber is not None
        before = dataclasses.astuple(self.pii_counts)
        scrub = functools.partial(self.scrubber.scrub, counts=self.pii_counts)
        out = {k: scrub(v) if isinstance(v, str) else [scrub(s) for s in v] for k, v in values.items()}
        if dataclasses.astuple(self.pii_counts) != before:
            self.pii_documents += 1
        return out

    def _quality(self, text: str) -> str | None:
        doc = quality.Doc(text)
        failed = None
        for f in self.filters:
            s = quality.score(f.name, doc)
            self.histograms[f.name][quality.bin_index(f, s)] += 1
            if failed is None and not f.passes(s):
                failed = QUALITY_PREFIX + f.name
        return failed

    def clean(
        self, position: int, values: Values, nbytes: int
    ) -> tuple[dict[str, Any] | None, str]:
        """Returns ``(cleaned values, "")`` or ``(None, drop reason)`` for the record at
        ``position`` of the partition (``nbytes`` input bytes)."""
        out = self._scrub(values) if self.scrubber is not None else dict(values)
        if self.decided is not None:
            reason = self.decided[0].get(position)
            if reason is not None:
                return None, reason
        else:
            reason = self._filter(text_lib.record_text(out))
            if reason is not None:
                self.filtered.append((position, reason))
                return None, reason
        if self.duplicates:
            reason_id = self.duplicates.get(position)
            if reason_id is not None:
                return None, _JOIN_REASONS[reason_id]
        self.kept_documents += 1
        self.kept_bytes += nbytes
        return out, ""

    def _filter(self, text: str) -> str | None:
        if self.filters:
            reason = self._quality(text)
            if reason:
                return reason
        if self.lang is not None and not self.lang.keeps(text):
            return LANGUAGE
        if self.eval_set is not None and self.eval_set.contaminated(text):
            return CONTAMINATED
        return None

    def decisions(self) -> tuple[np.ndarray, dict[str, list[int]]]:
        """The per-record filters' outcome: int64 rows (position, index in :data:`REASONS`), and
        the score histograms (what the tokenizing pass reuses)."""
        rows = np.asarray([(p, REASONS.index(r)) for p, r in self.filtered], np.int64).reshape(
            -1, 2
        )
        return rows, {k: v.tolist() for k, v in self.histograms.items()}

    def to_json(self) -> dict[str, Any]:
        """What the report aggregates over partitions."""
        return {
            "pii": {"documents": self.pii_documents, **dataclasses.asdict(self.pii_counts)},
            "histograms": {k: v.tolist() for k, v in self.histograms.items()},
            "kept": {"documents": self.kept_documents, "bytes": self.kept_bytes},
        }

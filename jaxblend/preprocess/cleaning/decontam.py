"""Decontamination: documents sharing a word n-gram with an evaluation file are dropped.

Evaluation texts and documents are compared after :func:`.text.normalize` (case-folded, punctuation
removed), word by word; the default n of 13 is the one GPT-3 (Brown et al., 2020) used for its
train/test overlap study. Evaluation texts shorter than n words contribute no n-gram (they are
counted as ``short``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from jaxblend.preprocess.cleaning import text as text_lib


class EvalSet:
    """The n-grams of the evaluation files."""

    def __init__(self, paths: Sequence[str], n: int, key: str) -> None:
        self.n = n
        self.ngrams: set[str] = set()
        self.texts = 0
        self.short = 0
        for path in paths:
            for text in _eval_texts(path, key):
                words = text_lib.normalized_words(text)
                self.texts += 1
                if len(words) < n:
                    self.short += 1
                    continue
                self.ngrams.update(text_lib.word_ngrams(words, n))

    def contaminated(self, text: str) -> bool:
        """Whether ``text`` shares an n-gram with the evaluation set."""
        if not self.ngrams:
            return False
        words = text_lib.normalized_words(text)
        return len(words) >= self.n and not self.ngrams.isdisjoint(
            text_lib.word_ngrams(words, self.n)
        )


def _eval_texts(path: str, key: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not path.endswith((".jsonl", ".json")):
        return [ln for ln in lines if ln.strip()]
    out = []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            value = json.loads(ln)[key]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"{os.path.abspath(path)}:{i + 1}: evaluation record has no string field {key!r} "
                f"({type(e).__name__}); set --clean_decontam_key"
            ) from None
        out.append(value if isinstance(value, str) else "\n".join(map(str, value)))
    return out

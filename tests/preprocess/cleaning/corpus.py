"""A generated corpus with planted problems, and what a cleaning run must keep of it."""

from __future__ import annotations

import dataclasses
import json
import random

from jaxblend.preprocess.cleaning import pii
from jaxblend.preprocess.cleaning import text as text_lib

_STOP = ("the", "to", "of", "and", "with", "that")


def _vocab(rng: random.Random, n: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return sorted({"".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(n)})


def good_doc(rng: random.Random, vocab: list[str], words: int) -> str:
    """Random words with stop words, in sentences of 12 words: passes every Gopher filter."""
    out = []
    for i in range(words):
        out.append(rng.choice(_STOP) if rng.random() < 0.15 else rng.choice(vocab))
        if i % 12 == 11:
            out[-1] += "."
    return " ".join(out)


def shingle_jaccard(a: str, b: str, n: int = 5) -> float:
    """Exact Jaccard similarity of the two texts' word n-gram sets (the MinHash shingles)."""
    sa = set(text_lib.word_ngrams(text_lib.normalized_words(a), n))
    sb = set(text_lib.word_ngrams(text_lib.normalized_words(b), n))
    return len(sa & sb) / len(sa | sb)


def mutate(rng: random.Random, vocab: list[str], doc: str, every: int) -> str:
    """Replaces one word in every ``every`` words (lower similarity for smaller ``every``)."""
    words = doc.split(" ")
    for i in range(every // 2, len(words), every):
        words[i] = rng.choice(vocab) + "q"
    return " ".join(words)


@dataclasses.dataclass
class Corpus:
    """Records in input order, the reason each planted one must be dropped, the eval texts."""

    texts: list[str]
    reasons: dict[int, str]  # record index -> expected drop reason
    eval_texts: list[str]
    similarities: dict[str, list[float]]  # "near"/"distant" -> exact shingle Jaccard of the pairs

    def expected_kept(self) -> list[str]:
        """The texts that survive, PII scrubbed, in input order."""
        s = pii.Scrubber()
        counts = pii.PIICounts()
        return [s.scrub(t, counts) for i, t in enumerate(self.texts) if i not in self.reasons]

    def write(self, path: str, texts: list[str] | None = None) -> str:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in (texts or self.texts))
        return path


def make_corpus(seed: int = 0, good: int = 60) -> Corpus:
    """Good documents plus planted exact duplicates, near-duplicates (Jaccard > 0.9, dropped) and
    distant variants (Jaccard < 0.6, kept), low-quality documents, PII and an eval-set overlap."""
    rng = random.Random(seed)
    vocab = _vocab(rng)
    entries: list[tuple[str, str | None]] = []
    sims: dict[str, list[float]] = {"near": [], "distant": []}
    eval_texts = []
    for i in range(good):
        doc = good_doc(rng, vocab, rng.randint(120, 200))
        if i == 3:  # PII in a document that is kept
            doc += " Write to jane.doe@example.com or call 8.8.8.8 and 2001:4860:4860::8888."
        if i % 10 == 9:  # its middle 20 words appear in an evaluation file
            words = doc.split(" ")
            eval_texts.append("Question: " + " ".join(words[40:60]) + " answer?")
            entries.append((doc, "contaminated"))
            continue
        entries.append((doc, None))
        if i % 10 == 1:  # exact duplicate, differing in case, punctuation and spacing
            entries.append(("  " + doc.upper().replace(".", " ! ") + "\n", "exact_duplicate"))
        if i % 10 == 4:  # near duplicate: one changed word
            words = doc.split(" ")
            words[len(words) // 2] = "zzqx"
            entries.append((" ".join(words), "near_duplicate"))
            sims["near"].append(shingle_jaccard(doc, entries[-1][0]))
        if i % 10 == 7:  # a distant variant: one word in 12 changed, kept
            entries.append((mutate(rng, vocab, doc, 12), None))
            sims["distant"].append(shingle_jaccard(doc, entries[-1][0]))
    eval_texts.append(good_doc(rng, vocab, 40))  # shares nothing with the corpus
    low = [
        ("too short to be a document.", "quality_word_count"),
        (
            " ".join("".join(rng.choices("abcdefghij", k=15)) for _ in range(80)) + " the and",
            "quality_mean_word_length",
        ),
        (good_doc(rng, vocab, 80) + " #" * 20, "quality_symbol_word_ratio"),
        ("\n".join("- " + good_doc(rng, vocab, 6) for _ in range(20)), "quality_bullet_lines"),
        (
            "\n".join([good_doc(rng, vocab, 8)] * 4 + [good_doc(rng, vocab, 60)]),
            "quality_dup_lines",
        ),
    ]
    for j, e in enumerate(low):
        entries.insert(7 + 11 * j, e)
    texts = [t for t, _ in entries]
    reasons = {i: r for i, (_, r) in enumerate(entries) if r is not None}
    return Corpus(texts, reasons, eval_texts, sims)

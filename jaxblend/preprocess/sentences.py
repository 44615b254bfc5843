"""Built-in rule-based sentence splitter for ``--split_sentences`` (no NLTK, no downloads).

A sentence ends at ``.``, ``!``, ``?``, ``…`` (optionally repeated, optionally followed by closing
quotes or brackets) when whitespace follows and the next word does not start with a lowercase letter;
and at the CJK full stops ``。！？`` unconditionally. Blank lines (paragraph breaks) always end a
sentence. A period after a known abbreviation (``e.g.``, ``Mr.``, ``Dr.``...) or a single capital
letter (an initial, ``J. Smith``) does not end one. Sentences are returned stripped of surrounding
whitespace; empty ones are omitted. Deterministic and pure: the same text always gives the same split.
"""

from __future__ import annotations

import re

_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "cf",
        "al",
        "fig",
        "figs",
        "no",
        "vol",
        "eq",
        "approx",
        "dept",
        "est",
        "inc",
        "ltd",
        "co",
        "corp",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "mt",
        "ft",
        "ave",
    ]
)

# Candidate boundary: terminal punctuation (+ closing quotes/brackets) then whitespace, or a CJK stop.
_BOUNDARY = re.compile(
    r"""([.!?\u2026]+['"\u2019\u201d)\]]*)(\s+)|([\u3002\uff01\uff1f]+)|(\n\s*\n\s*)"""
)
_WORD_BEFORE = re.compile(r"(\S+)$")


def _is_abbreviation(text: str, end: int) -> bool:
    """True if the period ending at ``text[end-1]`` closes an abbreviation or an initial."""
    m = _WORD_BEFORE.search(text, 0, end)
    if m is None:
        return False
    word = m.group(1).rstrip(".").lstrip("(\"'")
    if len(word) == 1 and word.isalpha() and word.isupper():
        return True
    return word.lower() in _ABBREVIATIONS


def split_sentences(text: str) -> list[str]:
    """Splits ``text`` into sentences with the rules in the module docstring.

    Args:
      text: A document.

    Returns:
      Non-empty, whitespace-stripped sentences in order (``[]`` for blank text).
    """
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        if m.group(1) is not None:
            punct = m.group(1)
            nxt = m.end()
            if nxt < len(text) and text[nxt].islower():
                continue
            if punct.rstrip("'\"\u2019\u201d)]") == "." and _is_abbreviation(text, m.start(1) + 1):
                continue
            cut = m.end(1)
        elif m.group(3) is not None:
            cut = m.end(3)
        else:
            cut = m.start(4)
        piece = text[start:cut].strip()
        if piece:
            out.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out

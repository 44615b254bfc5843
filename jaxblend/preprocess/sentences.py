"""Sentence splitters for ``--split_sentences``: NLTK's Punkt (Megatron's) or a built-in one.

:func:`make_splitter` returns a `Splitter` (a function of the text):

* ``punkt`` (default): what Megatron-LM's ``preprocess_data.py`` does. The text is cut into chunks
  of 1,000,000 characters and each chunk is split by NLTK's Punkt model for ``lang`` (the
  ``punkt_tab`` data, looked up in NLTK's data path, e.g. ``$NLTK_DATA``). With ``keep_newlines``
  the Punkt period-context pattern also swallows the whitespace after a sentence end, so newlines
  between sentences stay in the sentences. Nothing is downloaded: missing data is an error that
  names it.
* ``builtin``: the rule-based splitter below, needing no data files.

Built-in rules: a sentence ends at ``.``, ``!``, ``?``, ``…`` (optionally repeated, optionally followed by closing
quotes or brackets) when whitespace follows and the next word does not start with a lowercase letter;
and at the CJK full stops ``。！？`` unconditionally. Blank lines (paragraph breaks) always end a
sentence. A period after a known abbreviation (``e.g.``, ``Mr.``, ``Dr.``...) or a single capital
letter (an initial, ``J. Smith``) does not end one. Sentences are returned stripped of surrounding
whitespace; empty ones are omitted. Deterministic and pure: the same text always gives the same split.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

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


PUNKT = "punkt"
BUILTIN = "builtin"
SPLITTERS = (PUNKT, BUILTIN)

# Megatron-LM splits each document in chunks of this many characters before sentence splitting.
CHUNK_CHARS = 1_000_000


class SplitterError(ValueError):
    """A sentence splitter cannot be loaded (nltk or its Punkt data missing, unknown kind)."""


Splitter = Callable[[str], list[str]]
"""Splits a document into the strings that become its sequences."""


class PunktSplitter:
    """NLTK Punkt over 1,000,000-character chunks, as Megatron-LM's preprocessing does.

    Args:
      lang: Punkt model name (``english``, ``german``, ...).
      keep_newlines: keep the whitespace (newlines) after each sentence end inside the sentences.

    Raises:
      SplitterError: nltk is not installed or the Punkt data for ``lang`` is not found.
    """

    def __init__(self, lang: str = "english", keep_newlines: bool = False) -> None:
        try:
            from nltk.tokenize import punkt
        except ImportError as e:
            raise SplitterError(
                "--split_sentences needs the nltk package (pip install nltk), or pass "
                "--sentence_splitter=builtin"
            ) from e
        import nltk

        for root in reversed(os.environ.get("NLTK_DATA", "").split(os.pathsep)):
            if root and root not in nltk.data.path:
                nltk.data.path.insert(0, root)  # set after nltk was imported: honour it anyway
        try:
            model = punkt.PunktTokenizer(lang)
        except (LookupError, ValueError, OSError) as e:
            raise SplitterError(
                f"--split_sentences needs NLTK's Punkt data for --lang={lang}: "
                f"tokenizers/punkt_tab/{lang}/ was not found in NLTK's data path "
                f"(NLTK_DATA={os.environ.get('NLTK_DATA', '<unset>')}); install it with "
                "`python -m nltk.downloader punkt_tab` (or copy it into $NLTK_DATA), or pass "
                "--sentence_splitter=builtin"
            ) from e
        if keep_newlines:
            self._tok = punkt.PunktSentenceTokenizer(
                train_text=model._params, lang_vars=_newline_keeping_vars(punkt)()
            )
        else:
            self._tok = model

    def __call__(self, text: str) -> list[str]:
        out: list[str] = []
        for i in range(0, len(text), CHUNK_CHARS):
            out.extend(self._tok.tokenize(text[i : i + CHUNK_CHARS]))
        return out


def _newline_keeping_vars(punkt):
    """A PunktLanguageVars whose sentence-end context takes any whitespace after the period."""

    class _KeepNewlines(punkt.PunktLanguageVars):
        # Punkt's own pattern requires \s+ before the next token; allowing \s* (and no leading
        # whitespace in the next-token group) leaves newlines attached to the sentence they end.
        _period_context_fmt = (
            r"\S*%(SentEndChars)s\s*(?=(?P<after_tok>%(NonWord)s|(?P<next_tok>\S+)))"
        )

    return _KeepNewlines


def make_splitter(
    kind: str = PUNKT, lang: str = "english", keep_newlines: bool = False
) -> Splitter:
    """Returns the sentence splitter ``kind`` (``punkt`` or ``builtin``).

    Raises:
      SplitterError: unknown kind, or Punkt cannot be loaded (the message names the missing data).
    """
    if kind == BUILTIN:
        if keep_newlines:
            raise SplitterError("--keep_newlines needs --sentence_splitter=punkt")
        return split_sentences
    if kind == PUNKT:
        return PunktSplitter(lang, keep_newlines)
    raise SplitterError(f"sentence_splitter={kind!r} must be one of {SPLITTERS}")

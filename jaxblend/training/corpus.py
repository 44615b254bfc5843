"""The built-in default corpus: three datasets generated from fixed grammars, the same everywhere.

* `code`  - small Python modules (functions, loops, arithmetic, docstrings);
* `prose` - paragraphs of sentences from a small English grammar;
* `legal` - licence-style agreements of numbered clauses.

The text is a pure function of `SEED` and the byte budget: choices come only from
`random.Random(seed).random()`, whose sequence Python guarantees across versions and platforms,
turned into indices with plain float arithmetic. Nothing is read from the machine and nothing is
downloaded, so every machine writes the same bytes; `corpus_digest` names them and the demo prints
it. Each dataset's documents are generated in order until the byte budget is reached, so a smaller
budget yields a prefix of a larger one.

The raw documents are written as jsonl, then tokenized by the real preprocessing CLI
(`python -m jaxblend.tools.preprocess`) with the built-in byte tokenizer. Finished datasets are
reused on later runs (`corpus_dir`: the directory name carries `VERSION` and the size).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Iterator

from absl import logging

from jaxblend import atomic_write

DATASETS = ("code", "prose", "legal")
VERSION = 1
SEED = 20261123


class _Choices:
    """Index choices from `random.Random.random()` only (its sequence is stable across versions)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed).random

    def below(self, n: int) -> int:
        return int(self._random() * n)

    def pick(self, items):
        return items[int(self._random() * len(items))]

    def chance(self, p: float) -> bool:
        return self._random() < p


_NOUNS = ["river", "market", "engine", "garden", "letter", "window", "teacher", "harbor", "signal", "village", "lantern", "record", "machine", "forest", "bridge", "council", "kitchen", "mirror", "station", "compass", "orchard", "archive", "ladder", "canal", "painter", "valley", "meadow", "tower", "farmer", "library", "circuit", "harvest", "island", "journey", "quarry", "workshop"]
_ADJECTIVES = ["quiet", "bright", "narrow", "ancient", "careful", "heavy", "distant", "simple", "golden", "sudden", "patient", "hollow", "crowded", "gentle", "broken", "steady", "silver", "modest", "curious", "restless"]
_VERBS = ["follows", "crosses", "repairs", "watches", "carries", "measures", "opens", "builds", "guards", "records", "finds", "remembers", "reaches", "divides", "gathers", "explains"]
_ADVERBS = ["slowly", "often", "rarely", "quietly", "together", "early", "carefully", "again"]
_PREPOSITIONS = ["near", "behind", "above", "under", "beside", "beyond", "across", "toward"]
_CONNECTIVES = ("Meanwhile", "Later", "Still", "In the morning", "By evening", "For years",
                "Without warning", "As a rule")


def _noun_phrase(c: _Choices) -> str:
    article = c.pick(("the", "a", "every", "one"))
    words = [c.pick(_ADJECTIVES), c.pick(_NOUNS)] if c.chance(0.6) else [c.pick(_NOUNS)]
    if article == "a" and words[0][0] in "aeiou":
        article = "an"
    return " ".join([article, *words])


def _sentence(c: _Choices) -> str:
    words = [_noun_phrase(c), c.pick(_VERBS), _noun_phrase(c)]
    if c.chance(0.5):
        words.append(f"{c.pick(_PREPOSITIONS)} {_noun_phrase(c)}")
    if c.chance(0.3):
        words.append(c.pick(_ADVERBS))
    text = " ".join(words)
    if c.chance(0.25):
        text = f"{c.pick(_CONNECTIVES)}, {text}"
    return text[0].upper() + text[1:] + "."


def _prose(c: _Choices) -> str:
    paragraphs = []
    for _ in range(1 + c.below(4)):
        paragraphs.append(" ".join(_sentence(c) for _ in range(2 + c.below(6))))
    return "\n\n".join(paragraphs)


_NAMES = ("total", "count", "index", "value", "width", "offset", "limit", "weight", "size", "step",
          "left", "right", "score", "delta")
_FUNCTIONS = ("scale", "merge", "clamp", "measure", "combine", "shift", "count_items", "average",
              "split_even", "normalize", "accumulate", "window")


def _expression(c: _Choices, names: list[str]) -> str:
    left = c.pick(names)
    right = c.pick(names) if c.chance(0.6) else str(c.below(100))
    return f"{left} {c.pick(('+', '-', '*', '//', '%'))} {right}"


def _function(c: _Choices) -> str:
    name = c.pick(_FUNCTIONS) + ("" if c.chance(0.5) else f"_{c.below(10)}")
    args = [_NAMES[i] for i in sorted({c.below(len(_NAMES)) for _ in range(1 + c.below(3))})]
    names = list(args)
    lines = [f"def {name}({', '.join(args)}):",
             (f'    """{c.pick(("Returns", "Computes", "Counts"))} the {c.pick(_NAMES)} of '
              f'{c.pick(_NOUNS)}s."""')]
    for _ in range(1 + c.below(4)):
        target = c.pick(_NAMES)
        kind = c.below(3)
        if kind == 0:
            lines.append(f"    {target} = {_expression(c, names)}")
        elif kind == 1:
            lines += [f"    for i in range({c.pick(names)}):",
                      f"        {target} = {_expression(c, names + ['i'])}"]
        else:
            lines += [f"    if {c.pick(names)} > {c.below(50)}:",
                      f"        {target} = {_expression(c, names)}",
                      "    else:",
                      f"        {target} = {c.below(10)}"]
        names.append(target)
    lines.append(f"    return {_expression(c, names)}")
    return "\n".join(lines)


def _code(c: _Choices) -> str:
    header = f'"""Helpers for the {c.pick(_ADJECTIVES)} {c.pick(_NOUNS)}."""\n'
    return header + "\n\n" + "\n\n\n".join(_function(c) for _ in range(1 + c.below(4))) + "\n"


_PARTIES = ("the Licensor", "the Licensee", "the Contributor", "the Recipient", "each Party")
_DUTIES = ("shall retain", "shall not remove", "may distribute", "shall provide", "may modify",
           "shall not sublicense", "must include", "may terminate")
_OBJECTS = ("this License", "the Work", "any Derivative Works", "the copyright notice",
            "the Source Code", "all warranties", "the attribution notices", "the Documentation")
_CONDITIONS = ("provided that the conditions of Section {n} are met",
               "without the prior written consent of the Licensor",
               "subject to the terms of this Agreement",
               "to the extent permitted by applicable law",
               "unless required by Section {n}")


def _legal(c: _Choices) -> str:
    title = f"{c.pick(_ADJECTIVES).upper()} {c.pick(_NOUNS).upper()} LICENSE AGREEMENT"
    clauses = [title, ""]
    for n in range(1, 3 + c.below(6)):
        text = f"{c.pick(_PARTIES)} {c.pick(_DUTIES)} {c.pick(_OBJECTS)}"
        if c.chance(0.7):
            text += ", " + c.pick(_CONDITIONS).format(n=1 + c.below(9))
        clauses.append(f"{n}. {text[0].upper() + text[1:]}.")
    clauses.append("")
    clauses.append("THE WORK IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND.")
    return "\n".join(clauses)


_GENERATORS: dict[str, Callable[[_Choices], str]] = {"code": _code, "prose": _prose, "legal": _legal}


def documents(name: str, max_bytes: int) -> Iterator[str]:
    """The documents of dataset `name` until their jsonl lines reach `max_bytes` bytes."""
    choices = _Choices(SEED + DATASETS.index(name))
    generate = _GENERATORS[name]
    written = 0
    while written < max_bytes:
        text = generate(choices)
        written += len(_jsonl_line(text))
        yield text


def _jsonl_line(text: str) -> bytes:
    return (json.dumps({"text": text}, ensure_ascii=False) + "\n").encode("utf-8")


def corpus_dir(workdir: str, max_bytes_per_dataset: int) -> str:
    """Where the corpus of this version and size lives under `workdir` (reused when present)."""
    return os.path.join(workdir, f"corpus-v{VERSION}-{max_bytes_per_dataset}")


def corpus_digest(paths: dict[str, str]) -> str:
    """SHA-256 of the raw jsonl files, in dataset order (names the corpus's bytes)."""
    h = hashlib.sha256()
    for name in DATASETS:
        with open(paths[name], "rb") as f:
            h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def write_raw(directory: str, max_bytes_per_dataset: int) -> dict[str, str]:
    """Writes `<directory>/<name>.jsonl` for each dataset (atomically); returns their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name in DATASETS:
        path = os.path.join(directory, f"{name}.jsonl")
        paths[name] = path
        if os.path.exists(path):
            continue
        count = written = 0
        with atomic_write.atomic_file(path) as f:
            for text in documents(name, max_bytes_per_dataset):
                line = _jsonl_line(text)
                f.write(line)
                written += len(line)
                count += 1
        logging.info("default corpus: %s: %d documents, %.1f MB", name, count, written / 1e6)
    return paths

"""What a dataset's tokenizer was: the facts preprocessing records beside the data, and reading them.

`python -m jaxblend.tools.preprocess` writes the run record (`jaxblend.preprocess.layout`) of
``<dir>/<name>`` to ``<dir>/.jaxblend/<name>.preprocess.json`` (`record_path`): the side files live
in a subdirectory so that ``<dir>`` holds only ``.bin``/``.idx`` pairs, as Megatron-LM's
``tools/merge_datasets.py`` requires; records written before sit at ``<dir>/<name>.preprocess.json``
and are still read (`record_paths`). Its ``tokenizer_facts`` entry holds a `TokenizerFacts` (identity,
vocabulary size, EOD and pad ids) and its ``max_token_id`` entry the largest token id of each
output dataset ``<output_prefix>_<key>_<level>``. `read_facts(prefix, access)` finds the record of a
dataset prefix (a local path or a bucket URL, read through TensorStore with the access's
object-store options) and returns its facts, or None for data without a record (made by
Megatron-LM, or by an older jaxblend): such data keeps the flags' values.

This module imports no tokenizer library: training and the tools read it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from jaxblend.access import DataAccess
from jaxblend.urls import is_url, local_path, map_paths

RECORD_SUFFIX = ".preprocess.json"
SIDE_DIR = ".jaxblend"
"""The subdirectory of a dataset directory that holds preprocessing's side files (run record,
cleaning report): every regular file directly in the directory is then half of a ``.bin``/``.idx``
pair."""
_LEVELS = ("document", "sentence")


@dataclasses.dataclass(frozen=True)
class TokenizerFacts:
    """The tokenizer a dataset was made with.

    Attributes:
      identity: the tokenizer type and, when it is loaded from files, a digest of their contents
        (``HuggingFaceTokenizer sha256:1a2b3c4d5e6f``); equal identities tokenize alike.
      vocab_size: the vocabulary size.
      eod_id: the end-of-document id (None: the tokenizer has none).
      pad_id: the padding id (None: the tokenizer has none).
      max_token_id: the largest token id in the dataset (None: not recorded).
    """

    identity: str
    vocab_size: int
    eod_id: int | None = None
    pad_id: int | None = None
    max_token_id: int | None = None

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("TokenizerFacts.identity is empty")
        if self.vocab_size < 1:
            raise ValueError(f"TokenizerFacts.vocab_size must be >= 1, got {self.vocab_size}")

    @property
    def type(self) -> str:
        """The tokenizer type (the identity's first word)."""
        return self.identity.split()[0]

    def describe(self) -> str:
        """One line: ``HuggingFaceTokenizer (vocab 1000): eod 0, pad none``."""

        eod, pad = ("none" if i is None else i for i in (self.eod_id, self.pad_id))
        return f"{self.type} (vocab {self.vocab_size}): eod {eod}, pad {pad}"

    def to_json(self) -> dict[str, Any]:
        """The record's ``tokenizer_facts`` entry (without the per-dataset ``max_token_id``)."""
        return {k: v for k, v in self.to_published().items() if k != "max_token_id"}

    def to_published(self) -> dict[str, Any]:
        """The facts as a publication record carries them: `to_json` plus ``max_token_id``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_published(cls, data: dict[str, Any]) -> TokenizerFacts:
        """Facts written by `to_published`.

        Raises:
          ValueError: malformed entry.
        """
        return cls.from_json(data, data.get("max_token_id"))

    @classmethod
    def from_json(cls, data: dict[str, Any], max_token_id: int | None = None) -> TokenizerFacts:
        """The facts of a record's ``tokenizer_facts`` entry.

        Raises:
          ValueError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                identity=str(data["identity"]),
                vocab_size=int(data["vocab_size"]),
                eod_id=None if data.get("eod_id") is None else int(data["eod_id"]),
                pad_id=None if data.get("pad_id") is None else int(data["pad_id"]),
                max_token_id=None if max_token_id is None else int(max_token_id),
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed tokenizer_facts entry {data!r}: {err}") from None


def record_candidates(prefix: str) -> list[str]:
    """The run-record prefixes a dataset prefix ``<P>_<key>_<level>`` may come from (``<P>``; a key
    may hold underscores, so every split point is a candidate, the shortest key first)."""
    directory = prefix[: prefix.rfind("/") + 1]  # the record lives in the dataset's directory
    parts = prefix[len(directory) :].split("_")
    if parts[-1] not in _LEVELS:
        return []
    return [directory + p for k in range(len(parts) - 2, 0, -1) if (p := "_".join(parts[:k]))]


def side_path(output_prefix: str, suffix: str) -> str:
    """Where preprocessing keeps side file ``suffix`` of ``output_prefix`` ``<dir>/<name>`` (a path
    or URL): ``<dir>/.jaxblend/<name><suffix>``."""
    head, sep, name = output_prefix.rpartition("/")
    return f"{head}{sep}{SIDE_DIR}/{name}{suffix}"


def record_path(output_prefix: str) -> str:
    """The run record of ``output_prefix``: ``<dir>/.jaxblend/<name>.preprocess.json``."""
    return side_path(output_prefix, RECORD_SUFFIX)


def legacy_record_path(output_prefix: str) -> str:
    """Where records were written before they moved to `SIDE_DIR`: ``<output_prefix>.preprocess.json``."""
    return output_prefix + RECORD_SUFFIX


def record_paths(prefix: str) -> list[str]:
    """The run records dataset ``prefix`` may have, in the order to try: for each of its
    `record_candidates`, `record_path` then `legacy_record_path`."""
    return [p for c in record_candidates(prefix) for p in (record_path(c), legacy_record_path(c))]


def where_records_were_sought(prefix: str) -> str:
    """Where `read_facts` looked for the record of dataset ``prefix``, for a message saying it has
    none: ``looked for <dir>/.jaxblend/<P>.preprocess.json or <dir>/<P>.preprocess.json``, or why
    no record was looked for (a name preprocessing does not give its outputs)."""
    paths = record_paths(prefix)
    if not paths:
        return (
            f"its name does not end in _<key>_{_LEVELS[0]} or _<key>_{_LEVELS[1]}, as "
            "jaxblend.tools.preprocess names its outputs, so no record was looked for"
        )
    return "looked for " + " or ".join(paths)


def read_text(path: str, access: DataAccess) -> str | None:
    """The text of a local file or bucket object; None when it does not exist."""
    if not is_url(path):
        try:
            with open(local_path(path), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None
    from jaxblend.storage.object_store.directory import ObjectDirectory
    from jaxblend.storage.object_store.location import resolve

    loc = resolve(path)
    directory = ObjectDirectory(loc.kvstore, access.object_store, display=path[: -len(loc.name)])
    data = directory.read(loc.name, "reading the preprocessing record")
    return None if data is None else data.decode("utf-8")


def read_facts(prefix: str, access: DataAccess | None = None) -> TokenizerFacts | None:
    """The tokenizer facts recorded for dataset ``prefix``; None when it has no record.

    Args:
      prefix: the dataset prefix (``/d/corpus_text_document``, ``gs://b/corpus_text_document``).
      access: how bucket objects are reached (default `DataAccess.from_env()`).

    Raises:
      ValueError: the record exists but cannot be read as one (names the file).
    """
    access = DataAccess.from_env() if access is None else access
    found = dataset_record(prefix, access)
    if found is None:
        return None
    path, record, key = found
    facts = record.get("tokenizer_facts")
    if facts is None:
        return None  # made before the facts were recorded
    try:
        return TokenizerFacts.from_json(facts, (record.get("max_token_id") or {}).get(key))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def dataset_record(prefix: str, access: DataAccess) -> tuple[str, dict, str] | None:
    """The preprocessing record that made dataset ``prefix``: (its path, the record, the
    dataset's key in its ``outputs``); None when no record names the dataset.

    Raises:
      ValueError: a record file that is not JSON (names the file).
    """
    name = os.path.basename(prefix)
    for path in record_paths(prefix):
        text = read_text(path, access)
        if text is None:
            continue
        try:
            record = json.loads(text)
        except ValueError as err:
            raise ValueError(f"{path}: not a preprocessing record ({err}); delete or fix it") from None
        outputs = record.get("outputs") or {}
        key = next((k for k, v in outputs.items() if os.path.basename(str(v)) == name), None)
        if key is not None:  # else another run's record
            return path, record, key
    return None


class TokenizerMismatchError(ValueError):
    """The datasets of a run were made with different tokenizers, or ids fall outside the model
    vocabulary."""


def blend_facts(
    prefixes: list[str],
    access: DataAccess | None = None,
    fallback: TokenizerFacts | None = None,
    allow_mixed: bool = False,
    known: Mapping[str, TokenizerFacts | None] | None = None,
) -> dict[str, TokenizerFacts]:
    """The tokenizer facts of each dataset of a run that has any (its record, else ``fallback``).

    Args:
      prefixes: the run's distinct dataset prefixes.
      access: how bucket objects are reached.
      fallback: the facts of datasets without a record (from ``--tokenizer_type`` ...), or None.
      allow_mixed: accept datasets made with different tokenizers.
      known: facts already known per prefix (None: the dataset has no record), e.g. from a
        publication record; those datasets' records are not read again.

    Returns:
      prefix -> facts, for the datasets whose tokenizer is known (in ``prefixes`` order).

    Raises:
      TokenizerMismatchError: two datasets come from different tokenizers (names both).
    """
    access = DataAccess.from_env() if access is None else access
    known = {} if known is None else known
    unread = [p for p in prefixes if p not in known]
    found = map_paths(lambda p: read_facts(p, access), unread, 32, "jaxblend-facts")
    read = {**found, **known}
    out = {p: f for p in dict.fromkeys(prefixes) if (f := read[p] or fallback) is not None}
    first = next(iter(out.items()), None)
    if first is not None and not allow_mixed:
        for prefix, facts in out.items():
            if facts.identity != first[1].identity:
                raise TokenizerMismatchError(
                    f"datasets {first[0]} ({first[1].identity}) and {prefix} ({facts.identity}) "
                    "were tokenized by different tokenizers; train on data of one tokenizer, or "
                    "pass --allow_mixed_tokenizers"
                )
    return out


def scan_max_token_id(prefix: str, access: DataAccess | None = None) -> int | None:
    """The largest token id of a dataset, read from its whole ``.bin`` (None when empty)."""
    from jaxblend.storage import IndexedDataset

    access = DataAccess.from_env() if access is None else access
    ds = IndexedDataset(prefix, access=access)
    return max(
        (int(p.max()) for start in range(0, len(ds), 4096)
         for p in ds[start : min(start + 4096, len(ds))] if len(p)),
        default=None,
    )


def check_ids(
    vocab_size: int,
    eod_id: int | None,
    pad_id: int | None,
    facts: dict[str, TokenizerFacts],
    access: DataAccess | None = None,
    log=None,
    vocab_label: str = "--vocab_size=",
) -> None:
    """Refuses ids the model vocabulary cannot hold.

    Args:
      vocab_size: the model vocabulary.
      eod_id: the EOD id used (None: none).
      pad_id: the pad id used (None: none).
      facts: prefix -> the facts of each dataset with a known tokenizer; its largest token id is
        checked (scanned from the data, and said through ``log``, when the record lacks it).
      access: how bucket objects are reached (for a scan).
      log: called with one line before a dataset is scanned.
      vocab_label: how messages name the vocabulary size (before its value).

    Raises:
      TokenizerMismatchError: one line naming the id, the flag and the vocabulary.
    """
    for flag, value in (("eod_id", eod_id), ("pad_id", pad_id)):
        if value is not None and not 0 <= value < vocab_size:
            raise TokenizerMismatchError(
                f"--{flag}={value} is outside the model vocabulary ({vocab_label}{vocab_size}): "
                f"ids must be in [0, {vocab_size})"
            )
    for prefix, f in facts.items():
        largest = f.max_token_id
        if largest is None:
            if log is not None:
                log(f"{prefix}: its record has no largest token id; reading the data to find it")
            largest = scan_max_token_id(prefix, access)
        if largest is not None and largest >= vocab_size:
            raise TokenizerMismatchError(
                f"dataset {prefix} holds token id {largest} >= the model vocabulary "
                f"({vocab_label}{vocab_size}); raise --vocab_size to at least {largest + 1} or "
                "use data of the model's tokenizer"
            )

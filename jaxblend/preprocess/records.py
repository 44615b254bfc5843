"""Decoding and checking raw input records: which are kept, and why the others are dropped.

A raw record (a line, a whole file, or a Parquet row) is decoded as UTF-8 and, for JSON inputs,
parsed as an object; each output key's field must be a string or a list of strings no longer than
``max_document_chars``. A record failing a check is dropped with a reason (`REASONS`, in report
order) and its location, or, with ``on_error="fail"``, raises `PreprocessDataError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxblend.preprocess.cleaning import cleaner as cleaner_lib

# Drop reasons, in report order.
MALFORMED_JSON = "malformed_json"
INVALID_UTF8 = "invalid_utf8"
MISSING_KEY = "missing_key"
NOT_STRING = "not_string"
EMPTY = "empty"
BLANK_LINE = "blank_line"
OVERSIZE = "oversize"
TOKENIZER_ERROR = "tokenizer_error"
BAD_CONVERSATION = "bad_conversation"  # --chat: not a conversation, or not renderable and maskable
REASONS = (
    BLANK_LINE,
    MALFORMED_JSON,
    INVALID_UTF8,
    MISSING_KEY,
    NOT_STRING,
    EMPTY,
    OVERSIZE,
    TOKENIZER_ERROR,
    BAD_CONVERSATION,
    *cleaner_lib.REASONS,
)

MAX_EXAMPLES = 5
ON_ERROR = ("skip", "fail")


class PreprocessDataError(ValueError):
    """A bad input record under ``on_error="fail"``; the message starts with ``file:line``."""


Drops = dict[str, dict[str, Any]]
"""reason -> ``{"count", "bytes", "examples"}``: dropped records, their input bytes and the
``file:line`` of the first `MAX_EXAMPLES`."""


def add_drops(into: Drops, drops: Mapping[str, Mapping[str, Any]]) -> None:
    """Adds ``drops`` to ``into`` (both `Drops`), keeping the first `MAX_EXAMPLES` examples."""
    for reason, d in drops.items():
        agg = into.setdefault(reason, {"count": 0, "bytes": 0, "examples": []})
        agg["count"] += d["count"]
        agg["bytes"] += d.get("bytes", 0)
        agg["examples"] += d["examples"][: MAX_EXAMPLES - len(agg["examples"])]


def in_report_order(drops: Drops) -> Drops:
    """``drops`` with its reasons in `REASONS` order."""
    rank = {reason: i for i, reason in enumerate(REASONS)}
    return dict(sorted(drops.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def payload_bytes(payload: object) -> int:
    """Input bytes of one raw record (a line, or a Parquet row's text fields in UTF-8)."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return len(payload)
    if isinstance(payload, dict):
        return sum(
            len(v.encode("utf-8", "surrogatepass")) for v in payload.values() if isinstance(v, str)
        )
    return 0


class RecordChecker:
    """Decodes raw records and checks their fields, dropping bad ones with a reason and location.

    Attributes:
      drops: the drops so far (`Drops`).
      locate: record ordinal -> ``file:line`` in the piece being read (set for every piece).
      nbytes: input bytes of the record being checked (set by `values`).
    """

    def __init__(self, on_error: str, max_document_chars: int) -> None:
        self.on_error = on_error
        self.max_document_chars = max_document_chars
        self.drops: Drops = {}
        self.locate: Callable[[int], str] | None = None
        self.nbytes = 0

    def drop(
        self, reason: str, ordinal: int, key: str | None, detail: str, nbytes: int | None = None
    ) -> None:
        """Drops a bad record (raises `PreprocessDataError` with ``on_error="fail"``); returns None,
        what a check returns for a dropped record."""
        assert self.locate is not None
        where = self.locate(ordinal)
        if key is not None:
            where = f"{where} (key {key!r})"
        if self.on_error == "fail":
            raise PreprocessDataError(f"{where}: {reason}: {detail}")
        self.count(reason, ordinal, where, nbytes)

    def count(
        self, reason: str, ordinal: int, where: str | None = None, nbytes: int | None = None
    ) -> None:
        """Counts a record dropped on purpose (e.g. by cleaning): never an error."""
        assert self.locate is not None
        nbytes = self.nbytes if nbytes is None else nbytes
        entry = {"count": 1, "bytes": nbytes, "examples": [where or self.locate(ordinal)]}
        add_drops(self.drops, {reason: entry})

    def values(
        self,
        ordinal: int,
        payload: object,
        fmt: str,
        keys: Sequence[str],
        check: Callable[[int, str, Any], Any] | None = None,
    ) -> dict[str, Any] | None:
        """The record's value of every key, or None when the record is dropped. ``check(ordinal,
        key, value)`` checks a present field's value, returning it (or what it becomes) or None
        having dropped the record; by default the value must be a text (`text`)."""
        fields = self.fields(ordinal, payload, fmt)
        if fields is None:
            return None
        per_key: dict[str, Any] = {}
        for key in keys:
            value = fields.get(key)
            if value is None:
                return self.drop(MISSING_KEY, ordinal, key, f"no field {key!r}")
            value = (check or self.text)(ordinal, key, value)
            if value is None:
                return None
            per_key[key] = value
        return per_key

    def fields(self, ordinal: int, payload: object, fmt: str) -> dict | None:
        """The record's fields as they are (no key checked), or None (dropped) when it is not a
        readable JSON object; sets ``nbytes``."""
        self.nbytes = payload_bytes(payload)
        if fmt == "parquet":
            return payload  # type: ignore[return-value]
        try:
            text = payload.decode("utf-8")  # type: ignore[attr-defined]
        except UnicodeDecodeError as e:
            detail = f"not valid UTF-8 ({e.reason} at byte {e.start})"
            return self.drop(INVALID_UTF8, ordinal, None, detail)
        if not fmt.startswith("jsonl"):
            return {"text": text}
        if not text or text.isspace():
            return self.drop(BLANK_LINE, ordinal, None, "blank line (not a JSON object)")
        try:
            fields = json.loads(text)
        except ValueError as e:
            return self.drop(MALFORMED_JSON, ordinal, None, str(e))
        if not isinstance(fields, dict):
            return self.drop(MALFORMED_JSON, ordinal, None, "not a JSON object")
        return fields

    def text(self, ordinal: int, key: str, value: object) -> str | list[str] | None:
        """One field's value when it is a string or a list of strings, else None (dropped)."""
        if isinstance(value, str):
            chars = len(value)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            chars = sum(map(len, value))
        else:
            kind = type(value).__name__
            detail = f"field {key!r} is {kind} (a string or a list of strings needed)"
            return self.drop(NOT_STRING, ordinal, key, detail)
        max_chars = self.max_document_chars
        if max_chars and chars > max_chars:
            detail = f"{chars} characters > max_document_chars={max_chars}"
            return self.drop(OVERSIZE, ordinal, key, detail)
        return value

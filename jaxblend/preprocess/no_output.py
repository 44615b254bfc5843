"""A run that writes no document fails, naming its inputs and why their records were dropped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxblend.preprocess import records as records_lib
from jaxblend.preprocess.config import PreprocessConfig


class NoDocumentsError(ValueError):
    """Every record of the inputs was dropped (or there were none): the datasets would be empty."""


def _hint(config: PreprocessConfig, reason: str) -> str:
    """What to change for the most common drop reason ('' when there is nothing to suggest)."""
    keys = " ".join(config.json_keys)
    hints = {
        records_lib.MISSING_KEY: f"check that --json-keys {keys} names fields the records have",
        records_lib.NOT_STRING: f"--json-keys {keys} must name fields holding text (or lists of it)",
        records_lib.MALFORMED_JSON: "the input must hold one JSON object per line",
        records_lib.INVALID_UTF8: "the input must be UTF-8 text",
        records_lib.EMPTY: "drop --drop-empty-documents to keep empty documents",
        records_lib.OVERSIZE: f"raise --max-document-chars (now {config.max_document_chars})",
        records_lib.TOKENIZER_ERROR: "check that --tokenizer-type matches the input "
        "(NullTokenizer reads space-separated integers)",
    }
    return hints.get(reason, "loosen the cleaning settings" if config.cleaning is not None else "")


def check_documents(
    config: PreprocessConfig,
    records: int,
    counts: Mapping[str, Mapping[str, int]],
    dropped: Mapping[str, Mapping[str, Any]],
) -> None:
    """Raises when no document was written (a record is kept or dropped for every key together).

    Raises:
      NoDocumentsError: one line naming ``config.input``, the records read, the most common drop
        reason with an example location, and what to change.
    """
    if any(c["documents"] for c in counts.values()):
        return
    where = "--input " + ", ".join(config.input)
    if not records:
        raise NoDocumentsError(
            f"{where}: no documents written: the input holds no records (an empty file?)"
        )
    reason, top = max(dropped.items(), key=lambda kv: kv[1]["count"])
    example = f", e.g. {top['examples'][0]}" if top["examples"] else ""
    hint = _hint(config, reason)
    raise NoDocumentsError(
        f"{where}: no documents written: all {records:,} records were dropped, most as {reason} "
        f"({top['count']:,}{example})" + (f"; {hint}" if hint else "")
    )

"""An input that gives no document fails the run, naming it and why its records were dropped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxblend.preprocess import partitions
from jaxblend.preprocess import records as records_lib
from jaxblend.preprocess.config import PreprocessConfig


class NoDocumentsError(ValueError):
    """Every record of an input was dropped (or it had none): it adds nothing to the datasets."""


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


def _fail(config: PreprocessConfig, where: str, records: int, dropped: Mapping[str, Any]) -> None:
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


def check_documents(
    config: PreprocessConfig,
    files: Sequence[partitions.InputFile],
    results: Sequence[Mapping[str, Any]],
    counts: Mapping[str, Mapping[str, int]],
    dropped: Mapping[str, Mapping[str, Any]],
) -> None:
    """Raises when an input file gave no document (a record is kept or dropped for every key).

    Args:
      config: the run's settings.
      files: the resolved input files.
      results: the partitions' results; their ``inputs`` say what each file gave (partitions
        finished by an older version lack it: then only the run as a whole is checked).
      counts: key -> the run's counts.
      dropped: reason -> the run's drops.

    Raises:
      NoDocumentsError: one line naming the input, the records read, the most common drop reason
        with an example location, and what to change.
    """
    if all("inputs" in r for r in results):
        per_file: dict[str, dict[str, Any]] = {}
        for r in results:
            for path, got in r["inputs"].items():
                entry = per_file.setdefault(path, {"records": 0, "documents": 0, "dropped": {}})
                entry["records"] += got["records"]
                entry["documents"] += got["documents"]
                records_lib.add_drops(entry["dropped"], got["dropped"])
        for f in files:
            entry = per_file.get(f.path, {"records": 0, "documents": 0, "dropped": {}})
            if not entry["documents"]:
                _fail(config, f"--input {f.path}", entry["records"], entry["dropped"])
    if not any(c["documents"] for c in counts.values()):
        records = sum(r["records"] for r in results)
        _fail(config, "--input " + ", ".join(config.input), records, dropped)

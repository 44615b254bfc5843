"""Turning a dataset's token ids back into text with the tokenizer it was made with (``--decode``).

`python -m jaxblend.tools.preprocess` records its tokenizer in ``<output_prefix>.preprocess.json``
(``settings.tokenizer``: the type, its options and every file with its SHA-256).
`recorded_spec(prefix, access)` rebuilds the `TokenizerSpec` from that record, checking that each
recorded file still exists and has the recorded SHA-256; `load_decoder(prefixes, access, fallback)`
loads one tokenizer for a run's datasets (offline, from local files), with ``fallback`` (from
``--tokenizer_type`` & co.) for data without a record (made by Megatron-LM).
"""

from __future__ import annotations

import hashlib
import json
import os

from jaxblend.access import DataAccess
from jaxblend.tokenizer_facts import RECORD_SUFFIX, _read_text, record_candidates


class DecodeError(ValueError):
    """The tokenizer of a dataset cannot be found, verified or loaded for ``--decode``."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _recorded_tokenizer(prefix: str, access: DataAccess) -> tuple[str, dict] | None:
    """(record path, its ``settings.tokenizer`` entry) of dataset ``prefix``; None without one."""
    name = os.path.basename(prefix)
    for candidate in record_candidates(prefix):
        path = candidate + RECORD_SUFFIX
        text = _read_text(path, access)
        if text is None:
            continue
        try:
            record = json.loads(text)
        except ValueError as err:
            raise DecodeError(f"{path}: not a preprocessing record ({err})") from None
        outputs = record.get("outputs") or {}
        if not any(os.path.basename(str(v)) == name for v in outputs.values()):
            continue  # another run's record
        entry = (record.get("settings") or {}).get("tokenizer")
        return (path, entry) if isinstance(entry, dict) else None
    return None


def recorded_spec(prefix: str, access: DataAccess | None = None):
    """The `TokenizerSpec` recorded with dataset ``prefix``, its files verified; None without a
    record.

    Raises:
      DecodeError: a recorded file is missing or its SHA-256 differs from the record's (one line
        naming the file, the record and the flags that supply another copy).
    """
    from jaxblend.preprocess import tokenizer_spec as tok_spec

    access = DataAccess.from_env() if access is None else access
    found = _recorded_tokenizer(prefix, access)
    if found is None:
        return None
    record_path, entry = found
    files = entry.get("files") or []
    for f in files:
        path, digest = str(f["path"]), str(f["sha256"])
        if not os.path.isfile(path):
            raise DecodeError(
                f"--decode: tokenizer file {path} recorded in {record_path} does not exist here; "
                "copy it there or pass --tokenizer_type and --tokenizer_model (or --vocab_file, "
                "--merge_file)"
            )
        actual = _sha256(path)
        if actual != digest:
            raise DecodeError(
                f"--decode: tokenizer file {path} has SHA-256 {actual[:12]}, not the "
                f"{digest[:12]} recorded in {record_path}; restore the original or pass "
                "--tokenizer_type and --tokenizer_model (or --vocab_file, --merge_file)"
            )
    kind = tok_spec.canonical_type(str(entry["type"]))
    paths = [str(f["path"]) for f in files]
    kwargs: dict = {"type": kind}
    if kind == tok_spec.GPT2BPE:
        kwargs.update(vocab_file=paths[0], merge_file=paths[1])
    elif paths:
        kwargs["model"] = paths[0]
    if kind == tok_spec.TIKTOKEN:
        kwargs.update(
            tiktoken_pattern=entry.get("tiktoken_pattern"),
            tiktoken_num_special_tokens=int(entry.get("tiktoken_num_special_tokens", 1000)),
            tiktoken_special_tokens=tuple(entry.get("tiktoken_special_tokens") or ()),
        )
    if kind in (tok_spec.TIKTOKEN, tok_spec.NULL):
        kwargs["vocab_size"] = entry.get("vocab_size")
    return tok_spec.TokenizerSpec(**kwargs)


def load_decoder(prefixes: list[str], access: DataAccess | None = None, fallback=None):
    """The tokenizer that decodes the datasets ``prefixes`` (their first record, else ``fallback``).

    Args:
      prefixes: the datasets to decode.
      access: how bucket objects (the records) are reached.
      fallback: the `TokenizerSpec` of ``--tokenizer_type`` & co., or None.

    Raises:
      DecodeError: no dataset has a record and no fallback is given, or a recorded file fails
        its check (one line saying how to supply the tokenizer).
    """
    from jaxblend.preprocess import tokenizers

    access = DataAccess.from_env() if access is None else access
    spec = None
    for prefix in dict.fromkeys(prefixes):
        spec = recorded_spec(prefix, access)
        if spec is not None:
            break
    if spec is None:
        spec = fallback
    if spec is None and not prefixes:
        raise DecodeError(
            "--decode: mock data has no recorded tokenizer; pass --tokenizer_type and "
            "--tokenizer_model (or --vocab_file, --merge_file) to decode it"
        )
    if spec is None:
        raise DecodeError(
            f"--decode: {prefixes[0]} has no preprocessing record naming its tokenizer; pass "
            "--tokenizer_type and --tokenizer_model (or --vocab_file, --merge_file) to decode it"
        )
    return tokenizers.load_tokenizer(spec)


def shorten(text: str, limit: int) -> str:
    """``text`` on one line (newlines shown as ``\\n``), cut to ``limit`` characters with ``…``
    (0: no limit)."""
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    if limit and len(text) > limit:
        return text[:limit] + "…"
    return text

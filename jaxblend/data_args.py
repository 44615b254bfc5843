"""Megatron-LM's data-args files: blends of many prefixes given in a file instead of on the line.

* ``--data_args_path FILE``: the file holds what ``--data_path`` would, whitespace-separated
  (``weight prefix weight prefix ...`` or ``prefix prefix ...``), on any number of lines.
* ``--per_split_data_args_path FILE``: a JSON object with ``train``, ``valid`` and ``test``, each a
  list of strings (``["0.3", "/d/a", "0.7", "/d/b"]``), one whitespace-separated string, or null.

Both are read as Megatron-LM reads them (local files only).
"""

from __future__ import annotations

import json

SPLITS = ("train", "valid", "test")


class DataArgsError(ValueError):
    """A data-args file is missing or malformed (the message names the flag and the file)."""


def _read(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise DataArgsError(f"--{flag}={path}: cannot read it ({e.strerror or e})") from e


def read_data_args(path: str) -> tuple[str, ...]:
    """The blend of a ``--data_args_path`` file, as ``--data_path`` tokens.

    Raises:
      DataArgsError: the file cannot be read or holds nothing.
    """
    tokens = tuple(_read(path, "data_args_path").split())
    if not tokens:
        raise DataArgsError(f"--data_args_path={path}: the file is empty; it should hold the blend")
    return tokens


def read_per_split_data_args(path: str) -> tuple[tuple[str, ...] | None, ...]:
    """The (train, valid, test) blends of a ``--per_split_data_args_path`` JSON file.

    Raises:
      DataArgsError: unreadable file, not JSON, a missing split or a value of another type.
    """
    text = _read(path, "per_split_data_args_path")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise DataArgsError(f"--per_split_data_args_path={path}: not JSON ({e})") from e
    if not isinstance(data, dict):
        raise DataArgsError(
            f"--per_split_data_args_path={path}: expected an object with train, valid and test"
        )
    out: list[tuple[str, ...] | None] = []
    for split in SPLITS:
        if split not in data:
            raise DataArgsError(f"--per_split_data_args_path={path}: no {split!r} entry")
        value = data[split]
        if value is None:
            out.append(None)
        elif isinstance(value, str):
            out.append(tuple(value.split()) or None)
        elif isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
            out.append(tuple(str(v) for v in value) or None)
        else:
            raise DataArgsError(
                f"--per_split_data_args_path={path}: {split!r} must be a list of strings, a "
                f"string or null, not {type(value).__name__}"
            )
    return tuple(out)

"""Megatron-LM's data-args files: blends of many prefixes given in a file instead of on the line.

* ``--data_args_path FILE``: the file holds what ``--data_path`` would, whitespace-separated
  (``weight prefix weight prefix ...`` or ``prefix prefix ...``), on any number of lines.
* ``--per_split_data_args_path FILE``: a JSON object with ``train``, ``valid`` and ``test``, each a
  list of strings (``["0.3", "/d/a", "0.7", "/d/b"]``), one whitespace-separated string, or null.

Both are read as Megatron-LM reads them (local files only) and parsed into `Blend`s here, once,
with the blends' one weight rule (`jaxblend.index.blend_spec`); a bad blend is refused naming the
flag, the file and the split.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from jaxblend.index.blend_spec import Blend, parse_optional_blend

SPLITS = ("train", "valid", "test")


class DataArgsError(ValueError):
    """A data-args file is missing or malformed (the message names the flag and the file)."""


def _read(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise DataArgsError(f"--{flag}={path}: cannot read it ({e.strerror or e})") from e


def _parsed(blend: Sequence[str] | str | None, where: str) -> Blend | None:
    try:
        return parse_optional_blend(blend, where)
    except ValueError as e:
        raise DataArgsError(str(e)) from None


def read_data_args(path: str) -> Blend:
    """The blend of a ``--data_args_path`` file (its items the file's ``--data_path`` tokens).

    Raises:
      DataArgsError: the file cannot be read, holds nothing or holds a bad blend.
    """
    tokens = tuple(_read(path, "data_args_path").split())
    if not tokens:
        raise DataArgsError(f"--data_args_path={path}: the file is empty; it should hold the blend")
    return _parsed(tokens, f"--data_args_path={path}: blend")


def read_per_split_data_args(path: str) -> tuple[Blend | None, ...]:
    """The (train, valid, test) blends of a ``--per_split_data_args_path`` JSON file (None: the
    split is absent: null or empty).

    Raises:
      DataArgsError: unreadable file, not JSON, a missing split, a value of another type or a bad
        blend.
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
    out: list[Blend | None] = []
    for split in SPLITS:
        if split not in data:
            raise DataArgsError(f"--per_split_data_args_path={path}: no {split!r} entry")
        value = data[split]  # null, one string, or a list of strings and numbers (weights)
        if not (value is None or isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value)
        )):
            raise DataArgsError(
                f"--per_split_data_args_path={path}: {split!r} must be a list of strings, a "
                f"string or null, not {type(value).__name__}"
            )
        out.append(_parsed(value, f"--per_split_data_args_path={path}: {split} blend"))
    return tuple(out)

"""Preprocessing inputs and their deterministic partitioning.

Inputs are files or globs: ``.jsonl`` (also ``.json``), ``.jsonl.gz``, ``.jsonl.zst``, ``.txt``
(also ``.txt.gz``/``.txt.zst``) and ``.parquet``. A text file holds one document per line
(``text_mode="line"``) or one document per file (``text_mode="file"``); its documents have the
single field ``text``.

:func:`plan_partitions` cuts the inputs into partitions that depend only on the resolved inputs and
the requested partition count (never on the number of workers): uncompressed line files are cut at
byte positions (a line belongs to the piece holding its first byte), Parquet files at row-group
boundaries, compressed files and one-document-per-file text files stay whole. Reading every
partition in order (:mod:`jaxblend.preprocess.readers`) yields exactly the records of reading every
file in order.
"""

from __future__ import annotations

import bisect
import dataclasses
import glob
import math
import os
from collections.abc import Sequence

FORMATS = ("jsonl", "jsonl.gz", "jsonl.zst", "txt", "txt.gz", "txt.zst", "parquet")
TEXT_MODES = ("line", "file")

# file suffix -> format; ``.json`` is a synonym of ``.jsonl``
_SUFFIXES = {"." + f: f for f in FORMATS} | {
    "." + f.replace("jsonl", "json"): f for f in FORMATS if f.startswith("jsonl")
}


class InputError(ValueError):
    """Inputs cannot be used: no match for a glob, a missing file, an unknown format."""


def detect_format(path: str) -> str:
    """Returns the format of ``path`` from its suffix.

    Args:
      path: An input file name.

    Returns:
      One of :data:`FORMATS`.

    Raises:
      InputError: The suffix is not a supported format.
    """
    lower = path.lower()
    for suffix, fmt in _SUFFIXES.items():
        if lower.endswith(suffix):
            return fmt
    raise InputError(f"input {path!r} has an unsupported suffix; supported: {', '.join(_SUFFIXES)}")


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One resolved input file.

    Attributes:
      path: Absolute path.
      format: One of :data:`FORMATS`.
      size: Size in bytes.
      mtime_ns: Modification time, recorded in run manifests to detect changed inputs.
    """

    path: str
    format: str
    size: int
    mtime_ns: int


def resolve_inputs(patterns: Sequence[str]) -> list[InputFile]:
    """Expands files and globs in order (each glob sorted), dropping repeats.

    Args:
      patterns: File paths or glob patterns.

    Returns:
      The input files, in order.

    Raises:
      InputError: No patterns, a glob matching nothing, a missing or non-regular file, or an
        unsupported suffix.
    """
    if not patterns:
        raise InputError("no --input given")
    seen: set[str] = set()
    out: list[InputFile] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern, recursive=True))
            if not matches:
                raise InputError(f"--input glob {pattern!r} matches no file")
        else:
            if not os.path.exists(pattern):
                raise InputError(f"--input file {pattern!r} does not exist")
            matches = [pattern]
        for match in matches:
            path = os.path.abspath(match)
            if path in seen:
                continue
            if not os.path.isfile(path):
                raise InputError(f"--input {match!r} is not a regular file")
            if not os.access(path, os.R_OK):
                raise InputError(f"--input file {match!r} is not readable")
            seen.add(path)
            st = os.stat(path)
            out.append(InputFile(path, detect_format(path), st.st_size, st.st_mtime_ns))
    return out


@dataclasses.dataclass(frozen=True)
class Piece:
    """A contiguous part of one input file.

    Attributes:
      path: The file.
      format: Its format.
      start: First byte (line formats), first row group (parquet), 0 (whole files).
      stop: End byte / end row group (exclusive); whole files use ``(0, 1)``.
      weight: Input bytes this piece accounts for (for progress and ETA).
      row_offset: Parquet only: index of the piece's first row in the file.
    """

    path: str
    format: str
    start: int
    stop: int
    weight: int
    row_offset: int = 0


@dataclasses.dataclass(frozen=True)
class Partition:
    """A unit of work: pieces read in order. ``index`` orders partitions in the merged output."""

    index: int
    pieces: tuple[Piece, ...]

    @property
    def weight(self) -> int:
        """Input bytes of the partition."""
        return sum(p.weight for p in self.pieces)


def _units(f: InputFile, text_mode: str) -> list[Piece]:
    """The units of a file: parquet row groups, or the whole file (one piece of bytes ``[0, size)``
    when it can be cut at lines, else ``(0, 1)``)."""
    if _splittable(f.format, text_mode):
        return [Piece(f.path, f.format, 0, f.size, f.size)]
    if f.format != "parquet":
        return [Piece(f.path, f.format, 0, 1, f.size)]
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(f.path).metadata
    except Exception as e:  # pyarrow raises ArrowInvalid and friends
        raise InputError(f"--input {f.path!r} is not a readable Parquet file: {e}") from e
    units = []
    row = 0
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        units.append(Piece(f.path, f.format, i, i + 1, int(rg.total_byte_size), row))
        row += rg.num_rows
    return units


def _splittable(fmt: str, text_mode: str) -> bool:
    """Whether a file can be cut at line boundaries (uncompressed, a document per line)."""
    return fmt == "jsonl" or (fmt == "txt" and text_mode == "line")


def auto_partitions(total_bytes: int) -> int:
    """Default partition count: one per 32 MiB of input, at least 8 (deterministic from inputs)."""
    return max(8, math.ceil(total_bytes / (32 << 20)))


def plan_partitions(
    files: Sequence[InputFile], num_partitions: int, text_mode: str = "line"
) -> list[Partition]:
    """Cuts the inputs into about ``num_partitions`` partitions of similar input size.

    Boundaries sit at ``round(k * W / P)`` of the cumulative input size W: a splittable file is cut
    there; an indivisible unit belongs to the partition holding its first byte. Partitions left empty
    are dropped and the rest renumbered, so the plan is a pure function of the inputs and P.

    Args:
      files: Resolved inputs, in order.
      num_partitions: Requested number of partitions P (>= 1; 0 means :func:`auto_partitions`).
      text_mode: ``line`` or ``file``, how ``.txt`` inputs hold documents.

    Returns:
      The partitions, in output order.

    Raises:
      ValueError: ``num_partitions`` < 0 or ``text_mode`` unknown.
    """
    if num_partitions < 0:
        raise ValueError(f"partitions={num_partitions} must be >= 0 (0 = automatic)")
    if text_mode not in TEXT_MODES:
        raise ValueError(f"text_mode={text_mode!r} must be one of {TEXT_MODES}")
    units = [unit for f in files for unit in _units(f, text_mode)]
    total = sum(u.weight for u in units)
    p_count = num_partitions or auto_partitions(total)
    bounds = [round(k * total / p_count) for k in range(p_count + 1)]

    def part_of(pos: int) -> int:  # the largest k < p_count with bounds[k] <= pos
        return bisect.bisect_right(bounds, pos, 0, p_count) - 1

    buckets: list[list[Piece]] = [[] for _ in range(p_count)]
    cum = 0
    for unit in units:
        pos = 0
        if not _splittable(unit.format, text_mode):  # indivisible: where its first byte is
            buckets[part_of(cum)].append(unit)
            pos = unit.weight
        while pos < unit.weight:  # cut at the bounds
            k = part_of(cum + pos)
            end = min(unit.weight, bounds[k + 1] - cum) if k + 1 < p_count else unit.weight
            end = max(end, pos + 1)
            buckets[k].append(Piece(unit.path, unit.format, pos, end, end - pos))
            pos = end
        cum += unit.weight
    parts = [b for b in buckets if b]
    return [Partition(i, tuple(b)) for i, b in enumerate(parts)]

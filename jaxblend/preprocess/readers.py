"""Input formats and deterministic partitioning for preprocessing.

Inputs are files or globs: ``.jsonl`` (also ``.json``), ``.jsonl.gz``, ``.jsonl.zst``, ``.txt``
(also ``.txt.gz``/``.txt.zst``) and ``.parquet``. A text file holds one document per line
(``text_mode="line"``) or one document per file (``text_mode="file"``); its documents have the
single field ``text``.

:func:`plan_partitions` cuts the inputs into partitions that depend only on the resolved inputs and the
requested partition count (never on the number of workers): uncompressed line files are cut at byte
positions (a line belongs to the piece holding its first byte), Parquet files at row-group boundaries,
compressed files and one-document-per-file text files stay whole. Reading every partition in order
yields exactly the records of reading every file in order.

Readers yield raw records (line bytes, whole-file bytes or Parquet field dicts) in batches together
with the input bytes consumed; decoding and validation happen in :mod:`jaxblend.preprocess.records`.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import io
import math
import os
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

FORMATS = ("jsonl", "jsonl.gz", "jsonl.zst", "txt", "txt.gz", "txt.zst", "parquet")
TEXT_MODES = ("line", "file")

_SUFFIXES = (
    (".jsonl.gz", "jsonl.gz"),
    (".json.gz", "jsonl.gz"),
    (".jsonl.zst", "jsonl.zst"),
    (".json.zst", "jsonl.zst"),
    (".jsonl", "jsonl"),
    (".json", "jsonl"),
    (".txt.gz", "txt.gz"),
    (".txt.zst", "txt.zst"),
    (".txt", "txt"),
    (".parquet", "parquet"),
)

_BUFFER = 1 << 20


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
    for suffix, fmt in _SUFFIXES:
        if lower.endswith(suffix):
            return fmt
    raise InputError(
        f"input {path!r} has an unsupported suffix; supported: "
        + ", ".join(s for s, _ in _SUFFIXES)
    )


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


def _splittable(f: InputFile, text_mode: str) -> bool:
    return f.format == "jsonl" or (f.format == "txt" and text_mode == "line")


def _units(f: InputFile, text_mode: str) -> list[Piece]:
    """Indivisible units of a non-splittable file (whole file, or parquet row groups)."""
    if f.format == "parquet":
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
    return [Piece(f.path, f.format, 0, 1, f.size)]


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
    units: list[tuple[InputFile, list[Piece] | None]] = []
    total = 0
    for f in files:
        if _splittable(f, text_mode):
            units.append((f, None))
            total += f.size
        else:
            pieces = _units(f, text_mode)
            units.append((f, pieces))
            total += sum(p.weight for p in pieces)
    p_count = num_partitions or auto_partitions(total)
    bounds = [round(k * total / p_count) for k in range(p_count + 1)]

    def part_of(pos: int) -> int:
        # Largest k with bounds[k] <= pos (k < p_count).
        lo, hi = 0, p_count - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if bounds[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    buckets: list[list[Piece]] = [[] for _ in range(p_count)]
    cum = 0
    for f, pieces in units:
        if pieces is None:
            if f.size == 0:
                continue
            pos = 0
            while pos < f.size:
                k = part_of(cum + pos)
                end = min(f.size, bounds[k + 1] - cum) if k + 1 < p_count else f.size
                end = max(end, pos + 1)
                buckets[k].append(Piece(f.path, f.format, pos, end, end - pos))
                pos = end
            cum += f.size
        else:
            for piece in pieces:
                buckets[part_of(cum)].append(piece)
                cum += piece.weight
    parts = [b for b in buckets if b]
    return [Partition(i, tuple(b)) for i, b in enumerate(parts)]


# ----------------------------------------------------------------------------------------------
# Reading


@dataclasses.dataclass
class RawBatch:
    """Raw records of one piece: ``ordinals[i]`` is record i's 0-based position in the piece.

    ``payloads`` hold line bytes (without the line ending), whole-file bytes, or, for Parquet, dicts
    of column values. ``consumed`` is the input bytes this batch accounts for.
    """

    ordinals: list[int]
    payloads: list
    consumed: int


class _Counter:
    """Tracks the position of the underlying (possibly compressed) file."""

    def __init__(self, raw: io.BufferedReader) -> None:
        self.raw = raw
        self.last = raw.tell()

    def delta(self) -> int:
        now = self.raw.tell()
        d, self.last = now - self.last, now
        return d


def _strip_eol(line: bytes) -> bytes:
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def iter_piece(
    piece: Piece,
    text_mode: str = "line",
    columns: Sequence[str] = ("text",),
    batch_bytes: int = 4 << 20,
    batch_records: int = 4096,
) -> Iterator[RawBatch]:
    """Reads one piece in batches.

    Args:
      piece: The piece to read.
      text_mode: ``line`` or ``file`` (``.txt`` inputs only).
      columns: Parquet columns to read (missing ones are omitted from the dicts).
      batch_bytes: Approximate payload bytes per batch.
      batch_records: Maximum records per batch.

    Yields:
      Batches of raw records in file order; the consumed bytes of all batches sum to the piece weight.

    Raises:
      InputError: The file cannot be opened or decompressed; names the file.
    """
    fmt = piece.format
    try:
        if fmt == "parquet":
            yield from _iter_parquet(piece, columns, batch_records)
        elif fmt.startswith("txt") and text_mode == "file":
            with _open_stream(piece.path, fmt) as (stream, _):
                data = stream.read()
            yield RawBatch([0], [data], piece.weight)
        elif fmt in ("jsonl", "txt"):
            yield from _iter_byte_range(piece, batch_bytes, batch_records)
        else:
            yield from _iter_compressed(piece, batch_bytes, batch_records)
    except (OSError, EOFError) as e:
        raise InputError(f"cannot read input {piece.path!r}: {e}") from e


def _iter_byte_range(piece: Piece, batch_bytes: int, batch_records: int) -> Iterator[RawBatch]:
    with open(piece.path, "rb", buffering=_BUFFER) as f:
        start = piece.start
        pos = _seek_first_line(f, start)
        reported = start
        ordinals: list[int] = []
        payloads: list[bytes] = []
        size = 0
        n = 0
        while pos < piece.stop:
            line = f.readline()
            if not line:
                break
            pos += len(line)
            ordinals.append(n)
            payloads.append(_strip_eol(line))
            n += 1
            size += len(line)
            if size >= batch_bytes or len(payloads) >= batch_records:
                now = min(pos, piece.stop)
                yield RawBatch(ordinals, payloads, now - reported)
                reported = now
                ordinals, payloads, size = [], [], 0
        yield RawBatch(ordinals, payloads, piece.stop - reported)


class _open_stream:
    """Opens a possibly compressed file; yields ``(buffered_stream, position_counter)``."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = path, fmt

    def __enter__(self) -> tuple[io.BufferedReader, _Counter]:
        raw = open(self.path, "rb", buffering=_BUFFER)
        self._closers = [raw]
        if self.fmt.endswith(".gz"):
            inner: io.RawIOBase = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        elif self.fmt.endswith(".zst"):
            import zstandard

            inner = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        else:
            return raw, _Counter(raw)
        stream = io.BufferedReader(inner, buffer_size=_BUFFER)  # type: ignore[arg-type]
        self._closers.insert(0, stream)
        return stream, _Counter(raw)

    def __exit__(self, *exc: object) -> None:
        for c in self._closers:
            c.close()


def _iter_compressed(piece: Piece, batch_bytes: int, batch_records: int) -> Iterator[RawBatch]:
    try:
        with _open_stream(piece.path, piece.format) as (stream, counter):
            ordinals: list[int] = []
            payloads: list[bytes] = []
            size = 0
            reported = 0
            for n, line in enumerate(stream):
                ordinals.append(n)
                payloads.append(_strip_eol(line))
                size += len(line)
                if size >= batch_bytes or len(payloads) >= batch_records:
                    d = counter.delta()
                    reported += d
                    yield RawBatch(ordinals, payloads, d)
                    ordinals, payloads, size = [], [], 0
            yield RawBatch(ordinals, payloads, piece.weight - reported)
    except Exception as e:
        if isinstance(e, InputError):
            raise
        if type(e).__name__ in ("ZstdError",) or isinstance(e, (OSError, EOFError, zlib.error)):
            raise InputError(f"cannot decompress input {piece.path!r}: {e}") from e
        raise


def _read_row_group(
    pf: Any, rg: int, wanted: list[str], path: str
) -> tuple[dict[str, list], int, int]:
    """One row group's columns as Python lists, its row count and byte size; InputError if corrupt."""
    import pyarrow as pa

    try:
        table = pf.read_row_group(rg, columns=wanted)
        cols = {c: table.column(c).to_pylist() for c in wanted}
        return cols, table.num_rows, pf.metadata.row_group(rg).total_byte_size
    except (pa.ArrowException, ValueError, OSError, EOFError) as e:
        raise InputError(
            f"--input {path!r}: row group {rg} is not readable Parquet: {type(e).__name__}: {e}"
        ) from e


def _iter_parquet(piece: Piece, columns: Sequence[str], batch_records: int) -> Iterator[RawBatch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(piece.path)
        names = set(pf.schema_arrow.names)
    except (pa.ArrowException, ValueError, OSError, EOFError) as e:
        raise InputError(f"--input {piece.path!r} is not a readable Parquet file: {e}") from e
    wanted = [c for c in columns if c in names]
    row = 0
    for rg in range(piece.start, piece.stop):
        cols, n, weight = _read_row_group(pf, rg, wanted, piece.path)
        for lo in range(0, n, batch_records):
            hi = min(n, lo + batch_records)
            payloads = [{c: cols[c][i] for c in wanted} for i in range(lo, hi)]
            yield RawBatch(list(range(row + lo, row + hi)), payloads, weight if hi == n else 0)
        if n == 0:
            yield RawBatch([], [], weight)
        row += n


def _seek_first_line(f: io.BufferedReader, start: int) -> int:
    """Positions ``f`` at the first line starting at or after byte ``start``; returns it."""
    if start > 0:
        f.seek(start - 1)
        if f.read(1) != b"\n":
            f.readline()  # the line holding byte `start` belongs to the previous piece
    else:
        f.seek(0)
    return f.tell()


def count_lines_before(path: str, offset: int) -> int:
    """Returns the number of newlines in the first ``offset`` bytes of ``path``."""
    count = 0
    with open(path, "rb", buffering=0) as f:
        remaining = offset
        while remaining > 0:
            chunk = f.read(min(remaining, 16 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count


class Locator:
    """Turns a record's ordinal within a piece into ``file:line`` (or ``file:row``) text.

    The line number of a byte-range piece that does not start at 0 needs the newline count before
    the piece; it is computed once, only when the first location of the piece is asked for.
    """

    def __init__(self, piece: Piece, text_mode: str) -> None:
        self.piece = piece
        self.text_mode = text_mode
        self._base: int | None = None

    def __call__(self, ordinal: int) -> str:
        p = self.piece
        if p.format == "parquet":
            return f"{p.path}:row {ordinal + 1}"
        if p.format.startswith("txt") and self.text_mode == "file":
            return f"{p.path}"
        if self._base is None:
            if p.start > 0 and p.format in ("jsonl", "txt"):
                with open(p.path, "rb") as f:
                    first = _seek_first_line(f, p.start)  # type: ignore[arg-type]
                self._base = count_lines_before(p.path, first)
            else:
                self._base = 0
        return f"{p.path}:{self._base + ordinal + 1}"

"""Reads the records of preprocessing partitions, in batches, in a fixed order.

Readers yield raw records (line bytes, whole-file bytes or Parquet field dicts) in batches together
with the input bytes consumed; decoding and validation happen in :mod:`jaxblend.preprocess.records`.
The inputs and their partitioning are :mod:`jaxblend.preprocess.partitions`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from jaxblend.preprocess.partitions import (
    InputError,
    Piece,
)

_BUFFER = 1 << 20

@dataclasses.dataclass
class RawBatch:
    """Raw records of one piece: ``ordinals[i]`` is record i's 0-based position in the piece.

    ``payloads`` hold line bytes (without the line ending), whole-file bytes, or, for Parquet, dicts
    of column values. ``consumed`` is the input bytes this batch accounts for.
    """

    ordinals: list[int]
    payloads: list
    consumed: int


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


def _batches(
    lines: Iterable[bytes], position: Callable[[], int], weight: int, batch_bytes: int,
    batch_records: int,
) -> Iterator[RawBatch]:
    """Batches of ``lines`` (line endings stripped); ``position()`` is the input bytes the lines so
    far came from, and the batches' consumed bytes add up to the piece's ``weight``."""
    ordinals: list[int] = []
    payloads: list[bytes] = []
    size = reported = 0
    for n, line in enumerate(lines):
        ordinals.append(n)
        payloads.append(_strip_eol(line))
        size += len(line)
        if size >= batch_bytes or len(payloads) >= batch_records:
            now = position()
            yield RawBatch(ordinals, payloads, now - reported)
            reported = now
            ordinals, payloads, size = [], [], 0
    yield RawBatch(ordinals, payloads, weight - reported)


def _lines_in_range(f: io.BufferedReader, piece: Piece) -> Iterator[bytes]:
    """The lines of an uncompressed file that start in ``[piece.start, piece.stop)``."""
    pos = _seek_first_line(f, piece.start)
    while pos < piece.stop:
        line = f.readline()
        if not line:
            return
        pos += len(line)
        yield line


def _iter_byte_range(piece: Piece, batch_bytes: int, batch_records: int) -> Iterator[RawBatch]:
    with open(piece.path, "rb", buffering=_BUFFER) as f:
        yield from _batches(
            _lines_in_range(f, piece),
            lambda: min(f.tell(), piece.stop) - piece.start,
            piece.weight,
            batch_bytes,
            batch_records,
        )


@contextlib.contextmanager
def _open_stream(path: str, fmt: str) -> Iterator[tuple[io.BufferedReader, io.BufferedReader]]:
    """Opens a possibly compressed file; yields ``(decompressed stream, the file itself)``."""
    with open(path, "rb", buffering=_BUFFER) as raw:
        if fmt.endswith(".gz"):
            inner: Any = gzip.GzipFile(fileobj=raw, mode="rb")
        elif fmt.endswith(".zst"):
            import zstandard

            inner = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        else:
            yield raw, raw
            return
        with io.BufferedReader(inner, buffer_size=_BUFFER) as stream:
            yield stream, raw


def _iter_compressed(piece: Piece, batch_bytes: int, batch_records: int) -> Iterator[RawBatch]:
    try:
        with _open_stream(piece.path, piece.format) as (stream, raw):
            yield from _batches(stream, raw.tell, piece.weight, batch_bytes, batch_records)
    except Exception as e:
        if type(e).__name__ == "ZstdError" or isinstance(e, (OSError, EOFError, zlib.error)):
            raise InputError(f"cannot decompress input {piece.path!r}: {e}") from e
        raise


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
        try:  # the row group's columns as Python lists
            table = pf.read_row_group(rg, columns=wanted)
            cols = {c: table.column(c).to_pylist() for c in wanted}
            n, weight = table.num_rows, pf.metadata.row_group(rg).total_byte_size
        except (pa.ArrowException, ValueError, OSError, EOFError) as e:
            raise InputError(
                f"--input {piece.path!r}: row group {rg} is not readable Parquet: "
                f"{type(e).__name__}: {e}"
            ) from e
        for lo in range(0, n, batch_records):
            hi = min(n, lo + batch_records)
            payloads = [{c: cols[c][i] for c in wanted} for i in range(lo, hi)]
            yield RawBatch(list(range(row + lo, row + hi)), payloads, weight if hi == n else 0)
        if n == 0:
            yield RawBatch([], [], weight)
        row += n


def _seek_first_line(f: io.BufferedReader, start: int) -> int:
    """Positions ``f`` at the first line starting at or after byte ``start``; returns it."""
    f.seek(max(start - 1, 0))
    if start > 0 and f.read(1) != b"\n":
        f.readline()  # the line holding byte `start` belongs to the previous piece
    return f.tell()


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
            self._base = 0
            if p.start > 0 and p.format in ("jsonl", "txt"):  # count the newlines before the piece
                with open(p.path, "rb") as f:
                    first = _seek_first_line(f, p.start)  # type: ignore[arg-type]
                    f.seek(0)
                    chunk = 16 << 20
                    reads = (f.read(min(chunk, first - at)) for at in range(0, first, chunk))
                    self._base = sum(data.count(b"\n") for data in reads)
        return f"{p.path}:{self._base + ordinal + 1}"

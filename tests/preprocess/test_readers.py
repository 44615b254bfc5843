"""Reading partitions: every record once, in order, with its location."""

from __future__ import annotations

import gzip
import json

import pytest

from jaxblend.preprocess import partitions as partitions_lib
from jaxblend.preprocess import readers


def _records(parts, text_mode="line", columns=("text",)):
    out = []
    for part in parts:
        for piece in part.pieces:
            for batch in readers.iter_piece(piece, text_mode, columns, batch_records=7):
                out.extend(batch.payloads)
    return out


def _weights(parts, text_mode="line"):
    total = 0
    for part in parts:
        for piece in part.pieces:
            total += sum(b.consumed for b in readers.iter_piece(piece, text_mode, batch_records=7))
    return total


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 7, 50, 400])
def test_byte_range_partitions_cover_every_line_once(tmp_path, num_partitions):
    lines = [f'{{"text": "{"x" * (i % 13)}{i}"}}' for i in range(120)]
    a = tmp_path / "a.jsonl"
    a.write_text("\n".join(lines[:70]) + "\n")
    b = tmp_path / "b.jsonl"
    b.write_text("\n".join(lines[70:]))  # no trailing newline
    files = partitions_lib.resolve_inputs([str(a), str(b)])
    parts = partitions_lib.plan_partitions(files, num_partitions)
    assert [p.index for p in parts] == list(range(len(parts)))
    assert len(parts) <= num_partitions
    assert [r.decode() for r in _records(parts)] == lines
    assert _weights(parts) == a.stat().st_size + b.stat().st_size
    assert parts == partitions_lib.plan_partitions(files, num_partitions)


def test_line_numbers_of_later_pieces(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1, 101)))
    parts = partitions_lib.plan_partitions(partitions_lib.resolve_inputs([str(path)]), 5)
    for part in parts:
        for piece in part.pieces:
            loc = readers.Locator(piece, "line")
            for batch in readers.iter_piece(piece):
                for ordinal, payload in zip(batch.ordinals, batch.payloads):
                    assert loc(ordinal) == f"{path}:{payload.decode().split()[1]}"


def test_compressed_parquet_and_file_mode(tmp_path):
    zstd = pytest.importorskip("zstandard")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = [f"doc {i}" for i in range(25)]
    body = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(body))
    (tmp_path / "b.jsonl.zst").write_bytes(zstd.ZstdCompressor().compress(body))
    pq.write_table(pa.table({"text": docs}), tmp_path / "c.parquet", row_group_size=10)
    (tmp_path / "d.txt").write_text("one\ntwo\n")
    files = partitions_lib.resolve_inputs([str(tmp_path / "*.*")])
    assert [f.format for f in files] == ["jsonl.gz", "jsonl.zst", "parquet", "txt"]
    parts = partitions_lib.plan_partitions(files, 4)
    recs = _records(parts)
    assert [json.loads(r)["text"] for r in recs[:50]] == docs + docs
    assert [r["text"] for r in recs[50:75]] == docs
    assert recs[75:] == [b"one", b"two"]
    assert _weights(parts) == sum(p.weight for p in parts)
    # Parquet row groups are separate units: 3 row groups
    pieces = [pc for p in parts for pc in p.pieces if pc.format == "parquet"]
    assert [(pc.start, pc.row_offset) for pc in pieces] == [(0, 0), (1, 10), (2, 20)]
    whole = partitions_lib.plan_partitions(partitions_lib.resolve_inputs([str(tmp_path / "d.txt")]), 3, "file")
    assert _records(whole, "file") == [b"one\ntwo\n"]


def test_unreadable_compressed_input_names_the_file(tmp_path):
    (tmp_path / "y.jsonl.gz").write_bytes(b"not gzip at all")
    piece = partitions_lib.plan_partitions(partitions_lib.resolve_inputs([str(tmp_path / "y.jsonl.gz")]), 1)[
        0
    ].pieces[0]
    with pytest.raises(partitions_lib.InputError, match="y.jsonl.gz"):
        list(readers.iter_piece(piece))

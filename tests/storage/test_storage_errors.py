"""Every malformed-file case raises IndexFormatError naming the file; fuzzed indexes never crash."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from jaxblend.access import DataAccess, ObjectStoreOptions
from jaxblend.storage import IndexedDataset, IndexFormatError, idx_format, open_kvstore

from .conftest import Corpus, copy_to_memory, random_docs, read_spans, write_corpus

BACKENDS = ["mmap", "tensorstore"]


def _rewrite(prefix: str, suffix: str, data: bytes) -> None:
    Path(prefix + suffix).write_bytes(data)


def _idx(c: Corpus) -> bytes:
    return Path(c.prefix + ".idx").read_bytes()


def _patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


def _expect_error(prefix: str, match: str, backend: str = "auto", **kwargs: object) -> None:
    with pytest.raises(IndexFormatError, match=match) as info:
        IndexedDataset(prefix, access=DataAccess(backend=backend), **kwargs)
    assert "corpus" in str(info.value)  # names the file


def _corrupt_cases(c: Corpus) -> list[tuple[str, str, bytes]]:
    data = _idx(c)
    n = len(c.sequences)
    d = len(c.docs) + 1
    ptr_off = 34 + 4 * n
    doc_off = 34 + 12 * n
    nonempty = int(np.flatnonzero(c.lengths)[1])
    return [
        (
            "magic",
            r"corpus\.idx: not an IndexedDataset index: magic",
            b"XXIDIDX\x00\x00" + data[9:],
        ),
        ("version", r"corpus\.idx: unsupported index version 2", _patch(data, 9, "<Q", 2)),
        ("dtype code", r"corpus\.idx: unknown token dtype code 9", _patch(data, 17, "<B", 9)),
        ("short header", r"corpus\.idx: truncated index: 20 bytes", data[:20]),
        ("empty", r"corpus\.idx: truncated index: 0 bytes", b""),
        ("truncated arrays", r"corpus\.idx: file is .* bytes but its header", data[:-3]),
        ("trailing byte", r"corpus\.idx: file is .* bytes but its header", data + b"\x00"),
        (
            "count N",
            r"corpus\.idx: file is .* bytes but its header \(N=",
            _patch(data, 18, "<Q", n + 1),
        ),
        ("count D", r"corpus\.idx: file is .* bytes but its header", _patch(data, 26, "<Q", d + 5)),
        ("huge N", r"corpus\.idx: file is .* bytes", _patch(data, 18, "<Q", 2**63)),
        ("D zero", r"document count is 0", _patch(data, 26, "<Q", 0)),
        (
            "pointer",
            rf"corpus\.idx: sequence_pointers\[{nonempty}\]",
            _patch(data, ptr_off + 8 * nonempty, "<q", 1),
        ),
        ("first pointer", r"sequence_pointers\[0\] is 2", _patch(data, ptr_off, "<q", 2)),
        ("negative length", r"sequence_lengths\[0\] is negative", _patch(data, 34, "<i", -1)),
        ("doc start", r"document_indices\[0\] is 1, expected 0", _patch(data, doc_off, "<q", 1)),
        (
            "doc end",
            rf"document_indices\[-1\] is {n - 1}, expected the sequence count {n}",
            _patch(data, doc_off + 8 * (d - 1), "<q", n - 1),
        ),
        (
            "doc decrease",
            r"document_indices decrease at position 2",
            _patch(data, doc_off + 8 * 2, "<q", 0),
        ),
    ]


@pytest.fixture
def plain_corpus(tmp_path: Path, rng: np.random.Generator) -> Corpus:
    docs = random_docs(rng, np.int32, 12, allow_empty=False)
    return write_corpus(str(tmp_path / "corpus"), np.int32, docs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corrupt_index_cases(plain_corpus: Corpus, backend: str) -> None:
    good = _idx(plain_corpus)
    for _, match, data in _corrupt_cases(plain_corpus):
        _rewrite(plain_corpus.prefix, ".idx", data)
        _expect_error(plain_corpus.prefix, match, backend)
    _rewrite(plain_corpus.prefix, ".idx", good)
    IndexedDataset(plain_corpus.prefix, access=DataAccess(backend=backend))


def test_corrupt_index_cases_memory(plain_corpus: Corpus) -> None:
    url = copy_to_memory(plain_corpus.prefix)
    kv = open_kvstore(url.rpartition("/")[0] + "/")
    for _, match, data in _corrupt_cases(plain_corpus):
        kv.write("corpus.idx", data).result()
        _expect_error(url, match)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bin_size_mismatch(plain_corpus: Corpus, backend: str) -> None:
    data = Path(plain_corpus.prefix + ".bin").read_bytes()
    expected = len(data)
    _rewrite(plain_corpus.prefix, ".bin", data[:-4])
    _expect_error(
        plain_corpus.prefix,
        rf"corpus\.bin: data file is {expected - 4} bytes but .*corpus\.idx implies {expected}",
        backend,
    )
    _rewrite(plain_corpus.prefix, ".bin", data + b"\x00")
    _expect_error(plain_corpus.prefix, rf"corpus\.bin: data file is {expected + 1} bytes", backend)


def test_bin_size_mismatch_memory(plain_corpus: Corpus) -> None:
    url = copy_to_memory(plain_corpus.prefix)
    kv = open_kvstore(url.rpartition("/")[0] + "/")
    data = Path(plain_corpus.prefix + ".bin").read_bytes()
    kv.write("corpus.bin", data[:-4]).result()
    _expect_error(
        url, rf"corpus\.bin: data file is {len(data) - 4} bytes but .*implies {len(data)}"
    )
    kv.write("corpus.bin", data + b"\x00" * 9).result()
    _expect_error(url, rf"corpus\.bin: data file is {len(data) + 9} bytes")
    kv.write("corpus.bin", b"").result()
    _expect_error(url, r"corpus\.bin: data file is 0 bytes")


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_files(plain_corpus: Corpus, backend: str) -> None:
    Path(plain_corpus.prefix + ".bin").unlink()
    _expect_error(plain_corpus.prefix, r"corpus\.bin: data file does not exist", backend)
    Path(plain_corpus.prefix + ".idx").unlink()
    _expect_error(plain_corpus.prefix, r"corpus\.idx: index file does not exist", backend)
    Path(plain_corpus.prefix + ".idx").mkdir()
    _expect_error(plain_corpus.prefix, r"corpus\.idx: index file is a directory", backend)


def test_missing_files_memory(plain_corpus: Corpus) -> None:
    url = copy_to_memory(plain_corpus.prefix)
    kv = open_kvstore(url.rpartition("/")[0] + "/")
    kv.delete_range(ts_range("corpus.bin")).result()
    _expect_error(url, r"corpus\.bin: data file does not exist")
    _expect_error(
        url.replace("corpus", "corpus_gone"), r"corpus_gone\.idx: index file does not exist"
    )


def ts_range(key: str) -> object:
    import tensorstore as ts

    return ts.KvStore.KeyRange(key, key + "\x00")


def test_multimodal_required_but_absent(plain_corpus: Corpus) -> None:
    _expect_error(
        plain_corpus.prefix,
        r"corpus\.idx: multimodal=True but the file holds no sequence modes",
        multimodal=True,
    )


def test_bad_options(plain_corpus: Corpus) -> None:
    for kwargs, match in [
        ({"multimodal": 1}, "multimodal must be"),
    ]:
        with pytest.raises(ValueError, match=match):
            IndexedDataset(plain_corpus.prefix, **kwargs)
    # Every read option comes from the one `DataAccess`, validated there.
    for make, match in [
        (lambda: DataAccess(backend="s3"), "backend must be one of"),
        (lambda: ObjectStoreOptions(request_concurrency=0), "request_concurrency"),
        (lambda: ObjectStoreOptions(coalesce_gap=-1), "coalesce_gap"),
    ]:
        with pytest.raises(ValueError, match=match):
            make()
    for removed in ("backend", "coalesce_gap", "io_concurrency", "file_io_mode", "context"):
        with pytest.raises(TypeError, match=removed):
            IndexedDataset(plain_corpus.prefix, **{removed: None})
    with pytest.raises(ValueError, match="needs a local prefix"):
        IndexedDataset("memory://x/y", access=DataAccess(backend="mmap"))
    with pytest.raises(ValueError, match="names a directory"):
        IndexedDataset("memory://x/")
    with pytest.raises(ValueError, match="names a directory"):
        IndexedDataset(str(Path(plain_corpus.prefix).parent) + "/")


def test_changed_files_detected_after_unpickle(
    tmp_path: Path, plain_corpus: Corpus, rng: np.random.Generator
) -> None:
    import pickle

    ds = IndexedDataset(plain_corpus.prefix)
    blob = pickle.dumps(ds)
    write_corpus(plain_corpus.prefix, np.int32, random_docs(rng, np.int32, 3, allow_empty=False))
    with pytest.raises(IndexFormatError, match="changed since this object was created"):
        len(pickle.loads(blob))


def _mutations(data: bytes, rng: np.random.Generator, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        kind = int(rng.integers(5))
        buf = bytearray(data)
        if kind == 0:  # flip a few random bytes
            for pos in rng.integers(0, len(buf), int(rng.integers(1, 5))):
                buf[pos] = int(rng.integers(256))
        elif kind == 1:  # truncate
            buf = buf[: int(rng.integers(0, len(buf)))]
        elif kind == 2:  # append junk
            buf += bytes(rng.integers(0, 256, int(rng.integers(1, 40))).astype(np.uint8))
        elif kind == 3:  # overwrite a header field with a random value
            off, fmt = [(9, "<Q"), (17, "<B"), (18, "<Q"), (26, "<Q")][int(rng.integers(4))]
            bits = 8 if fmt == "<B" else 64
            struct.pack_into(fmt, buf, off, int(rng.integers(0, 2**bits - 1, dtype=np.uint64)))
        else:  # small integer change of an array entry
            pos = int(rng.integers(34, len(buf)))
            buf[pos] = (buf[pos] + int(rng.integers(1, 3))) % 256
        out.append(bytes(buf))
    return out


def test_fuzz_index_mutations(tmp_path: Path, rng: np.random.Generator) -> None:
    docs = random_docs(rng, np.int16, 10, allow_empty=True)
    modes = [[int(rng.integers(0, 3)) for _ in d] for d in docs]
    c = write_corpus(str(tmp_path / "corpus"), np.int16, docs, modes)
    data = _idx(c)
    clean_errors = valid_reads = 0
    for k, mutated in enumerate(_mutations(data, rng, 400)):
        _rewrite(c.prefix, ".idx", mutated)
        backend = "tensorstore" if k % 4 == 0 else "mmap"
        try:
            ds = IndexedDataset(c.prefix, access=DataAccess(backend=backend))
        except IndexFormatError:
            clean_errors += 1
            continue
        # Accepted: every sequence must be readable and within the .bin.
        n = len(ds)
        flat = read_spans(ds, np.arange(n), np.zeros(n), ds.sequence_lengths)
        assert flat.shape[0] == int(ds.sequence_lengths.sum())
        for i in range(len(ds)):
            assert ds.get(i).shape[0] == ds.sequence_lengths[i]
        valid_reads += 1
    assert clean_errors > 200 and clean_errors + valid_reads == 400


def test_parse_index_rejects_directly() -> None:
    with pytest.raises(IndexFormatError, match="x.idx: truncated"):
        idx_format.parse_index(b"MMIDIDX", "x.idx")
    with pytest.raises(ValueError, match="not storable"):
        idx_format.dtype_code(np.uint32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_prefix_suggests_the_likely_fix(tmp_path: Path, backend: str) -> None:
    docs = random_docs(np.random.default_rng(0), np.uint16, 3)
    out = tmp_path / "out"
    write_corpus(str(out) + "_text_document", np.uint16, docs)
    # A prefix given with its .bin/.idx suffix: the prefix without it.
    for suffix in (".bin", ".idx"):
        given = f"{out}_text_document{suffix}"
        with pytest.raises(IndexFormatError) as info:
            IndexedDataset(given, access=DataAccess(backend=backend))
        assert str(info.value) == (
            f"{given}.idx: index file does not exist; a prefix has no {suffix} suffix: give "
            f"{out}_text_document"
        )
    # preprocess's --output-prefix instead of the dataset it wrote.
    with pytest.raises(IndexFormatError) as info:
        IndexedDataset(str(out), access=DataAccess(backend=backend))
    assert str(info.value) == (
        f"{out}.idx: index file does not exist; preprocessing appends _{{key}}_{{level}} to its "
        f"output prefix: did you mean {out}_text_document?"
    )
    write_corpus(str(out) + "_title_document", np.uint16, docs)
    with pytest.raises(IndexFormatError, match=r"did you mean .*out_text_document\?$"):
        IndexedDataset(str(out), access=DataAccess(backend=backend))
    with pytest.raises(IndexFormatError, match=r"did you mean .*out_title_document\?$"):
        IndexedDataset(str(tmp_path / "out_title"), access=DataAccess(backend=backend))
    # Nothing better known: the plain message.
    with pytest.raises(IndexFormatError, match=r"nothing\.idx: index file does not exist$"):
        IndexedDataset(str(tmp_path / "nothing"), access=DataAccess(backend=backend))


def test_missing_remote_prefix_with_a_suffix_suggests_the_prefix(plain_corpus: Corpus) -> None:
    url = copy_to_memory(plain_corpus.prefix)
    for suffix in (".bin", ".idx"):
        with pytest.raises(IndexFormatError) as info:
            IndexedDataset(url + suffix)
        assert str(info.value).startswith(f"{url}{suffix}.idx: index file does not exist")
        assert str(info.value).endswith(f"; a prefix has no {suffix} suffix: give {url}")
    IndexedDataset(url)  # the suggested prefix opens

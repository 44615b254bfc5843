"""Writer -> reader round trips over every dtype, backend and prefix form."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import jaxblend
from jaxblend.access import DataAccess, ObjectStoreOptions
from jaxblend.storage import IndexedDataset, IndexedDatasetBuilder, exists, token_dtype_for_vocab
from jaxblend.storage.sequence_spans import SequenceSpans

from .conftest import ALL_DTYPES, Corpus, copy_to_memory, random_docs, read_spans, write_corpus

BACKENDS = ["mmap", "tensorstore"]


def assert_matches(ds: IndexedDataset, c: Corpus) -> None:
    assert ds.dtype == c.dtype
    assert len(ds) == len(c.sequences)
    assert ds.num_documents == len(c.docs)
    assert ds.num_tokens == c.flat.shape[0]
    np.testing.assert_array_equal(ds.sequence_lengths, c.lengths)
    np.testing.assert_array_equal(ds.document_indices, c.document_indices)
    np.testing.assert_array_equal(
        ds.sequence_pointers, (np.cumsum(c.lengths.astype(np.int64)) - c.lengths) * c.dtype.itemsize
    )
    for i, s in enumerate(c.sequences):
        got = ds.get(i)
        assert got.dtype == c.dtype
        np.testing.assert_array_equal(got, s)
    if c.modes is None:
        assert ds.sequence_modes is None
    else:
        np.testing.assert_array_equal(ds.sequence_modes, [m for d in c.modes for m in d])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_every_dtype(
    tmp_path: Path, rng: np.random.Generator, dtype: type, backend: str
) -> None:
    c = write_corpus(str(tmp_path / "d"), dtype, random_docs(rng, dtype, 12))
    assert_matches(IndexedDataset(c.prefix, access=DataAccess(backend=backend)), c)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_multisequence_and_empty(corpus: Corpus, backend: str) -> None:
    assert_matches(IndexedDataset(corpus.prefix, access=DataAccess(backend=backend)), corpus)


def test_add_document_equals_add_sequence(tmp_path: Path, rng: np.random.Generator) -> None:
    docs = random_docs(rng, np.int32, 25)
    a = write_corpus(str(tmp_path / "a"), np.int32, docs)
    b = write_corpus(str(tmp_path / "b"), np.int32, docs, use_add_document=True)
    for suffix in (".bin", ".idx"):
        assert Path(a.prefix + suffix).read_bytes() == Path(b.prefix + suffix).read_bytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_multimodal_modes(tmp_path: Path, rng: np.random.Generator, backend: str) -> None:
    docs = random_docs(rng, np.uint8, 15)
    modes = [[int(rng.integers(-128, 128)) for _ in d] for d in docs]
    c = write_corpus(str(tmp_path / "mm"), np.uint8, docs, modes)
    assert_matches(IndexedDataset(c.prefix, access=DataAccess(backend=backend)), c)
    assert_matches(IndexedDataset(c.prefix, access=DataAccess(backend=backend), multimodal=True), c)
    plain = IndexedDataset(c.prefix, access=DataAccess(backend=backend), multimodal=False)
    assert plain.sequence_modes is None
    c2 = write_corpus(str(tmp_path / "mm2"), np.uint8, docs, modes, use_add_document=True)
    assert Path(c.prefix + ".idx").read_bytes() == Path(c2.prefix + ".idx").read_bytes()


def test_empty_dataset(tmp_path: Path) -> None:
    prefix = str(tmp_path / "empty")
    with IndexedDatasetBuilder(prefix, np.uint16):
        pass
    for backend in BACKENDS:
        ds = IndexedDataset(prefix, access=DataAccess(backend=backend))
        assert len(ds) == 0 and ds.num_documents == 0 and ds.num_tokens == 0
        assert read_spans(ds, [], [], []).shape == (0,)
        assert [s.shape for s in ds[:]] == [(0,)]  # Megatron's slice of nothing: one empty array
    assert IndexedDataset(prefix, multimodal=True).sequence_modes.shape == (0,)
    mem = IndexedDataset(copy_to_memory(prefix))
    assert len(mem) == 0 and [s.shape for s in mem[:]] == [(0,)]


def test_tensorstore_reads_with_the_access_options(corpus: Corpus) -> None:
    for concurrency, gap in ((1, 0), (2, 4096), (64, 1 << 20)):
        store = ObjectStoreOptions(request_concurrency=concurrency, coalesce_gap=gap)
        ds = IndexedDataset(
            corpus.prefix, access=DataAccess(backend="tensorstore", object_store=store)
        )
        assert ds.object_store == store and ds.access.backend == "tensorstore"
        np.testing.assert_array_equal(np.concatenate(ds[:]), corpus.flat)


def test_memory_backend(corpus: Corpus) -> None:
    url = copy_to_memory(corpus.prefix)
    ds = IndexedDataset(url)
    assert ds.backend == "tensorstore"
    assert_matches(ds, corpus)
    assert ds.fingerprint == IndexedDataset(corpus.prefix).fingerprint
    spec_prefix = {"driver": "memory", "path": url.removeprefix("memory://")}
    assert_matches(IndexedDataset(spec_prefix), corpus)
    assert exists(url) and exists(spec_prefix) and not exists(url + "_nope")


def test_file_url_and_pathlike(corpus: Corpus) -> None:
    for prefix in (
        "file://" + corpus.prefix,
        Path(corpus.prefix),
        {"driver": "file", "path": corpus.prefix},
    ):
        ds = IndexedDataset(prefix)
        assert ds.backend == "mmap"
        assert_matches(ds, corpus)
    assert_matches(IndexedDataset("file://" + corpus.prefix, access=DataAccess(backend="tensorstore")), corpus)
    assert exists(corpus.prefix) and IndexedDataset.exists("file://" + corpus.prefix)
    assert not exists(corpus.prefix + "x")


def test_builder_accepts_file_url_and_torch_like(tmp_path: Path) -> None:
    prefix = "file://" + str(tmp_path / "u")
    with IndexedDatasetBuilder(prefix, np.int64) as b:
        b.add_sequence([1, 2, 3])
        b.add_sequence(np.array([4], dtype=np.uint8))
        b.end_document()
    ds = IndexedDataset(str(tmp_path / "u"))
    np.testing.assert_array_equal(ds.get(0), [1, 2, 3])
    np.testing.assert_array_equal(ds.get(1), [4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_get_offsets_and_bounds(corpus: Corpus, backend: str) -> None:
    ds = IndexedDataset(corpus.prefix, access=DataAccess(backend=backend))
    seqs = corpus.sequences
    i = int(np.argmax(corpus.lengths))
    np.testing.assert_array_equal(ds.get(i, 3, 5), seqs[i][3:8])
    np.testing.assert_array_equal(ds.get(i, 4), seqs[i][4:])
    np.testing.assert_array_equal(ds.get(-1), seqs[-1])
    assert ds.get(i, len(seqs[i])).shape == (0,)
    with pytest.raises(IndexError, match=rf"sequence index {len(ds)} out of range for {len(ds)}"):
        ds.get(len(ds))
    with pytest.raises(IndexError, match="outside sequence"):
        ds.get(i, 1, len(seqs[i]))
    with pytest.raises(IndexError, match="outside sequence"):
        ds.get(i, -1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_megatron_indexing_and_slices(corpus: Corpus, backend: str, rng: np.random.Generator) -> None:
    ds = IndexedDataset(corpus.prefix, access=DataAccess(backend=backend))
    seqs = corpus.sequences
    n = len(seqs)
    for i in [*rng.integers(0, n, 10).tolist(), 0, n - 1, -1, -n, np.int64(3)]:
        np.testing.assert_array_equal(ds[i], seqs[i])
        assert ds[i].dtype == corpus.dtype
    for lo, hi in [(0, n), (3, 9), (5, 5), (-4, None), (None, 2)]:
        got = ds[lo:hi]
        want = seqs[lo:hi]
        assert len(got) == max(len(want), 1)  # Megatron: an empty slice is one empty array
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(ValueError, match="contiguous"):
        ds[0:6:2]
    with pytest.raises(IndexError, match="out of range"):
        ds[n]
    with pytest.raises(TypeError, match="Unexpected type"):
        ds["0"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_spans_out_of_order_overlapping(
    corpus: Corpus, backend: str, rng: np.random.Generator
) -> None:
    ds = IndexedDataset(corpus.prefix, access=DataAccess(backend=backend))
    seqs = corpus.sequences
    n = len(seqs)
    idx = np.concatenate([rng.integers(0, n, 30), [5, 5, 4, 6, 3, 2, 1, 0, n - 1]])
    offs = np.array([rng.integers(0, len(seqs[j]) + 1) for j in idx])
    lens = np.array([rng.integers(0, len(seqs[j]) - o + 1) for j, o in zip(idx, offs)])
    want = np.concatenate([seqs[j][o : o + ln] for j, o, ln in zip(idx, offs, lens)])
    np.testing.assert_array_equal(read_spans(ds, idx, offs, lens), want)
    for j, o, ln in zip(idx.tolist(), offs.tolist(), lens.tolist()):
        np.testing.assert_array_equal(ds.get(j, o, ln), seqs[j][o : o + ln])


@pytest.mark.parametrize("gap", [0, 4096])
def test_span_reads_backends_agree(tmp_path: Path, rng: np.random.Generator, gap: int) -> None:
    flat = rng.integers(0, 2**31 - 1, 50_000).astype(np.int32)
    prefix = str(tmp_path / "flat")
    with IndexedDatasetBuilder(prefix, np.int32) as b:
        b.add_document(flat, [20_000, 30_000])
    n = 300
    seq = rng.integers(0, 2, n)
    size = np.where(seq == 0, 20_000, 30_000)
    offs = rng.integers(0, size)
    counts = np.minimum(rng.integers(0, 600, n), size - offs)
    # adjacent, overlapping, duplicate and zero-length spans; the last tokens of the file
    seq[:7] = [0, 0, 0, 0, 1, 0, 1]
    offs[:7] = [100, 110, 105, 105, 4000, 0, 29_995]
    counts[:7] = [10, 10, 20, 20, 0, 0, 5]
    starts = np.where(seq == 0, 0, 20_000) + offs
    expected = np.concatenate([flat[s : s + c] for s, c in zip(starts, counts)])
    mm = read_spans(IndexedDataset(prefix), seq, offs, counts)
    coalesced = ObjectStoreOptions(coalesce_gap=gap)
    tsr = read_spans(
        IndexedDataset(prefix, access=DataAccess(backend="tensorstore", object_store=coalesced)),
        seq, offs, counts,
    )
    mem = read_spans(
        IndexedDataset(copy_to_memory(prefix), access=DataAccess(object_store=coalesced)),
        seq, offs, counts,
    )
    np.testing.assert_array_equal(mm, expected)
    np.testing.assert_array_equal(tsr, expected)
    np.testing.assert_array_equal(mem, expected)
    for ds in (IndexedDataset(prefix), IndexedDataset(prefix, access=DataAccess(backend="tensorstore"))):
        with pytest.raises(IndexError, match=r"start=49999, length=2 leaves the 50000 tokens"):
            read_spans(ds, [0, 1], [0, 29_999], [1, 2])
        with pytest.raises(IndexError):
            read_spans(ds, [0], [-1], [1])
        with pytest.raises(IndexError):
            read_spans(ds, [2], [0], [1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_pickle_before_and_after_open(corpus: Corpus, backend: str) -> None:
    ds = IndexedDataset(corpus.prefix, access=DataAccess(backend=backend))
    fresh = pickle.loads(pickle.dumps(ds))
    assert repr(fresh) == repr(ds)
    assert fresh._state is None  # handles reopen lazily
    np.testing.assert_array_equal(fresh.get(7), corpus.sequences[7])
    _ = ds.fingerprint
    again = pickle.loads(pickle.dumps(fresh))
    assert again.fingerprint == ds.fingerprint
    assert_matches(again, corpus)
    ds.close()
    np.testing.assert_array_equal(ds.get(2), corpus.sequences[2])


def test_pickle_memory_prefix(corpus: Corpus) -> None:
    ds = IndexedDataset(copy_to_memory(corpus.prefix))
    again = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(again.get(1), corpus.sequences[1])


def _read_in_child(ds: IndexedDataset) -> tuple[str, list[int]]:
    return ds.fingerprint, ds.get(len(ds) - 1).tolist()


def test_pickle_across_spawn(corpus: Corpus) -> None:
    import multiprocessing

    ds = IndexedDataset(corpus.prefix)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        fp, last = pool.apply(_read_in_child, (ds,))
    assert fp == ds.fingerprint
    assert last == corpus.sequences[-1].tolist()


def test_fingerprint_is_content_identity(
    tmp_path: Path, corpus: Corpus, rng: np.random.Generator
) -> None:
    same = write_corpus(str(tmp_path / "copy"), corpus.dtype, corpus.docs)
    assert IndexedDataset(same.prefix).fingerprint == IndexedDataset(corpus.prefix).fingerprint
    other = write_corpus(str(tmp_path / "other"), corpus.dtype, random_docs(rng, np.uint16, 5))
    fp = IndexedDataset(other.prefix).fingerprint
    assert fp != IndexedDataset(corpus.prefix).fingerprint
    assert len(fp) == 32 and int(fp, 16) >= 0


def test_thread_safe_lazy_open(corpus: Corpus) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ds = pickle.loads(pickle.dumps(IndexedDataset(corpus.prefix)))
    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda i: ds.get(i % len(ds)).tolist(), range(64)))
    assert results == [corpus.sequences[i % len(corpus.sequences)].tolist() for i in range(64)]


def test_token_dtype_for_vocab() -> None:
    assert token_dtype_for_vocab(1) == np.uint16
    assert token_dtype_for_vocab(65499) == np.uint16
    assert token_dtype_for_vocab(65500) == np.int32
    assert token_dtype_for_vocab(200_000) == np.int32
    for bad in (0, -5):
        with pytest.raises(ValueError, match="vocab_size must be > 0"):
            token_dtype_for_vocab(bad)
    for bad in (True, 3.0, "10"):
        with pytest.raises(TypeError, match="vocab_size must be a positive integer"):
            token_dtype_for_vocab(bad)


def test_top_level_reexports() -> None:
    assert jaxblend.IndexedDataset is IndexedDataset
    assert jaxblend.IndexedDatasetBuilder is IndexedDatasetBuilder
    assert issubclass(jaxblend.IndexFormatError, ValueError)
    assert jaxblend.token_dtype_for_vocab is token_dtype_for_vocab
    assert set(jaxblend.__all__) >= {
        "IndexedDataset",
        "IndexedDatasetBuilder",
        "IndexFormatError",
        "token_dtype_for_vocab",
    }


def test_open_datasets_hold_no_file_descriptors(corpus) -> None:
    """A blend of thousands of local datasets must not run out of descriptors (EMFILE)."""
    import os

    before = len(os.listdir("/proc/self/fd"))
    datasets = [IndexedDataset(corpus.prefix) for _ in range(64)]
    assert len(os.listdir("/proc/self/fd")) == before
    tokens = [ds.get(1) for ds in datasets]  # every `.bin` mapped by its token reader
    assert len(os.listdir("/proc/self/fd")) == before
    view = datasets[0].sequence_pointers
    for ds in datasets:
        ds.close()
    np.testing.assert_array_equal(view, IndexedDataset(corpus.prefix).sequence_pointers)
    np.testing.assert_array_equal(tokens[0], IndexedDataset(corpus.prefix).get(1))
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 1


def test_span_reads_refuse_a_destination_they_do_not_fit(corpus: Corpus) -> None:
    ds = IndexedDataset(corpus.prefix)
    reader = SequenceSpans([ds])
    seq = np.flatnonzero(ds.sequence_lengths >= 2)[:1].astype(np.int64)
    zero, two = np.zeros(1, np.int64), np.full(1, 2, np.int64)
    with pytest.raises(ValueError, match=r"range 0 goes to out\[3:5\], outside the 4 items"):
        reader.read(zero, seq, zero, two, np.empty(4, ds.dtype), two + 1)
    with pytest.raises(ValueError, match="1-D C-contiguous"):
        reader.read(zero, seq, zero, two, np.empty((4, 2), ds.dtype)[:, 0], zero)
    out = np.empty(4, ds.dtype)
    reader.read(zero, seq, zero, two, out, two)
    np.testing.assert_array_equal(out[2:], ds.get(int(seq[0]), 0, 2))

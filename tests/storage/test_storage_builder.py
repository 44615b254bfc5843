"""Builder behaviour: merging, atomic publication, abort, input validation, property round trip."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxblend.access import DataAccess
from jaxblend.storage import IndexedDataset, IndexedDatasetBuilder, IndexFormatError, idx_format

from .conftest import random_docs, write_corpus


def _files(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


class TestMerge:
    def test_merge_equals_direct_write(self, tmp_path: Path, rng: np.random.Generator) -> None:
        a, b, c = (random_docs(rng, np.uint16, 9) for _ in range(3))
        write_corpus(str(tmp_path / "pa"), np.uint16, a)
        write_corpus(str(tmp_path / "pb"), np.uint16, b)
        direct = write_corpus(str(tmp_path / "direct"), np.uint16, c + a + b)
        with IndexedDatasetBuilder(tmp_path / "merged", np.uint16) as builder:
            for doc in c:
                builder.add_document(np.concatenate(doc) if doc else [], [len(s) for s in doc])
            builder.merge(tmp_path / "pa")
            builder.merge("file://" + str(tmp_path / "pb"))
            assert builder.num_documents == len(a) + len(b) + len(c)
            assert builder.num_tokens == direct.flat.shape[0]
        for suffix in (".bin", ".idx"):
            assert (tmp_path / f"merged{suffix}").read_bytes() == Path(
                direct.prefix + suffix
            ).read_bytes()

    def test_merge_multimodal(self, tmp_path: Path, rng: np.random.Generator) -> None:
        docs = random_docs(rng, np.int8, 6)
        modes = [[int(rng.integers(0, 4)) for _ in d] for d in docs]
        write_corpus(str(tmp_path / "part"), np.int8, docs, modes)
        with IndexedDatasetBuilder(tmp_path / "m", np.int8, multimodal=True) as b:
            b.merge(tmp_path / "part")
            b.merge(tmp_path / "part")
        ds = IndexedDataset(str(tmp_path / "m"))
        flat_modes = [m for d in modes for m in d]
        np.testing.assert_array_equal(ds.sequence_modes, flat_modes + flat_modes)
        # a non-multimodal builder drops the modes (Megatron-Core behaviour)
        with IndexedDatasetBuilder(tmp_path / "plain", np.int8) as b:
            b.merge(tmp_path / "part")
        assert IndexedDataset(str(tmp_path / "plain")).sequence_modes is None
        # a multimodal builder cannot merge data without modes
        write_corpus(str(tmp_path / "nomodes"), np.int8, [[np.arange(3, dtype=np.int8)]])
        with (
            pytest.raises(
                IndexFormatError, match="nomodes.idx: multimodal=True but the file holds no"
            ),
            IndexedDatasetBuilder(tmp_path / "m2", np.int8, multimodal=True) as b,
        ):
            b.merge(tmp_path / "nomodes")
        assert not (tmp_path / "m2.idx").exists()

    def test_merge_dtype_mismatch_names_both(self, tmp_path: Path) -> None:
        write_corpus(str(tmp_path / "src"), np.int32, [[np.arange(4, dtype=np.int32)]])
        with (
            IndexedDatasetBuilder(tmp_path / "dst", np.uint16) as b,
            pytest.raises(
                ValueError, match=r"src\.idx \(dtype int32\) into .*dst\.idx \(dtype uint16\)"
            ),
        ):
            b.merge(tmp_path / "src")

    def test_merge_errors(self, tmp_path: Path) -> None:
        write_corpus(str(tmp_path / "src"), np.int32, [[np.arange(4, dtype=np.int32)]])
        with IndexedDatasetBuilder(tmp_path / "dst", np.int32) as b:
            with pytest.raises(IndexFormatError, match=r"missing\.idx: index file does not exist"):
                b.merge(tmp_path / "missing")
            b.add_sequence([1, 2])
            with pytest.raises(
                ValueError,
                match=r"merge\(\): 1 sequence\(s\) were added after the last end_document",
            ):
                b.merge(tmp_path / "src")
            b.end_document()
        (tmp_path / "src.bin").write_bytes(b"\x00" * 4)
        with (
            IndexedDatasetBuilder(tmp_path / "dst2", np.int32) as b,
            pytest.raises(IndexFormatError, match=r"src\.bin: data file is 4 bytes"),
        ):
            b.merge(tmp_path / "src")


class TestAtomicity:
    def test_temp_names_then_publish(self, tmp_path: Path) -> None:
        b = IndexedDatasetBuilder(tmp_path / "x", np.int32)
        b.add_document(np.arange(10), [10])
        names = _files(tmp_path)
        assert len(names) == 1 and names[0].startswith(f"x.bin.tmp-{os.getpid()}-")
        b.finalize()
        assert _files(tmp_path) == ["x.bin", "x.idx"]
        with pytest.raises(RuntimeError, match="already finalized"):
            b.add_sequence([1])

    def test_exception_leaves_nothing(self, tmp_path: Path) -> None:
        with pytest.raises(KeyError), IndexedDatasetBuilder(tmp_path / "x", np.int32) as b:
            b.add_document(np.arange(10), [10])
            raise KeyError("boom")
        assert _files(tmp_path) == []

    def test_abort_is_idempotent(self, tmp_path: Path) -> None:
        b = IndexedDatasetBuilder(tmp_path / "x", np.uint8)
        b.add_sequence([1])
        b.abort()
        b.abort()
        assert _files(tmp_path) == []
        with pytest.raises(RuntimeError, match="already aborted"):
            b.finalize()

    def test_unended_document_in_context_aborts(self, tmp_path: Path) -> None:
        with (
            pytest.raises(ValueError, match=r"finalize\(\): 1 sequence\(s\)"),
            IndexedDatasetBuilder(tmp_path / "x", np.uint8) as b,
        ):
            b.add_sequence([1, 2])
        assert _files(tmp_path) == []

    def test_failed_finalize_keeps_previous_dataset(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        old = write_corpus(str(tmp_path / "x"), np.int32, [[np.arange(5, dtype=np.int32)]])
        old_bytes = {s: Path(old.prefix + s).read_bytes() for s in (".bin", ".idx")}

        def broken(*args: object, **kwargs: object) -> int:
            raise OSError("disk full")

        monkeypatch.setattr(idx_format, "write_index", broken)
        with (
            pytest.raises(OSError, match="disk full"),
            IndexedDatasetBuilder(tmp_path / "x", np.int32) as b,
        ):
            b.add_document(np.arange(7), [7])
        assert _files(tmp_path) == ["x.bin", "x.idx"]
        assert {s: Path(old.prefix + s).read_bytes() for s in (".bin", ".idx")} == old_bytes

    def test_garbage_collected_builder_removes_temps(self, tmp_path: Path) -> None:
        b = IndexedDatasetBuilder(tmp_path / "x", np.int32)
        b.add_sequence([1, 2, 3])
        del b
        import gc

        gc.collect()
        assert _files(tmp_path) == []

    def test_many_small_documents(self, tmp_path: Path) -> None:
        lengths = np.arange(20_000) % 7
        tokens = np.arange(int(lengths.sum())) % 100
        with IndexedDatasetBuilder(tmp_path / "x", np.uint8) as b:
            pos = 0
            for n in lengths.tolist():
                b.add_document(tokens[pos : pos + n], [n])
                pos += n
        ds = IndexedDataset(str(tmp_path / "x"))
        np.testing.assert_array_equal(ds.sequence_lengths, lengths)
        np.testing.assert_array_equal(ds.document_indices, np.arange(len(lengths) + 1))
        np.testing.assert_array_equal(np.concatenate(ds[:]), tokens)

    def test_overwrite_existing(self, tmp_path: Path) -> None:
        write_corpus(str(tmp_path / "x"), np.int32, [[np.arange(5, dtype=np.int32)]])
        write_corpus(str(tmp_path / "x"), np.int32, [[np.arange(3, dtype=np.int32)]] * 2)
        assert _files(tmp_path) == ["x.bin", "x.idx"]
        assert len(IndexedDataset(str(tmp_path / "x"))) == 2


class TestValidation:
    def test_bad_tokens(self, tmp_path: Path) -> None:
        with IndexedDatasetBuilder(tmp_path / "x", np.uint16) as b:
            with pytest.raises(ValueError, match="must be 1-D"):
                b.add_sequence(np.zeros((2, 2), np.uint16))
            with pytest.raises(
                ValueError, match=r"values in \[-1, 3\] outside the range of uint16"
            ):
                b.add_sequence([-1, 3])
            with pytest.raises(ValueError, match="outside the range of uint16"):
                b.add_document(np.array([70000]), [1])
            with pytest.raises(
                ValueError, match="float64 cannot be stored as integer dtype uint16"
            ):
                b.add_sequence(np.array([1.5]))
            with pytest.raises(ValueError, match="lengths sum to 3 but the document has 2 tokens"):
                b.add_document([1, 2], [1, 2])
            with pytest.raises(ValueError, match=r"lengths must lie in"):
                b.add_document([1, 2], [3, -1])
            with pytest.raises(
                ValueError, match="modes given to a builder created with multimodal=False"
            ):
                b.add_document([1, 2], [2], [0])
        assert len(IndexedDataset(str(tmp_path / "x"))) == 0

    def test_bad_modes_and_args(self, tmp_path: Path) -> None:
        with IndexedDatasetBuilder(tmp_path / "x", np.uint16, multimodal=True) as b:
            with pytest.raises(ValueError, match=r"mode must be an integer in \[-128, 127\]"):
                b.add_sequence([1], mode=300)
            with pytest.raises(ValueError, match="modes must be 2 integers"):
                b.add_document([1, 2], [1, 1], [0])
            with pytest.raises(ValueError, match="modes must fit int8"):
                b.add_document([1, 2], [1, 1], [0, 1000])
        with pytest.raises(ValueError, match="not storable"):
            IndexedDatasetBuilder(tmp_path / "y", np.uint32)
        with pytest.raises(ValueError, match="does not exist"):
            IndexedDatasetBuilder(tmp_path / "nodir" / "y", np.uint16)
        with pytest.raises(ValueError, match="not on the local filesystem"):
            IndexedDatasetBuilder("memory://a/b", np.uint16)


_DTYPES = st.sampled_from(
    [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float64, np.float32, np.uint16]
)


@st.composite
def _datasets(draw: st.DrawFn) -> tuple[np.dtype, list[list[list[int]]], bool]:
    dtype = np.dtype(draw(_DTYPES))
    lo, hi = (-100, 100) if dtype.kind != "u" else (0, 200)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
    seq = st.lists(st.integers(lo, hi), max_size=12)
    docs = draw(st.lists(st.lists(seq, max_size=4), max_size=8))
    return dtype, docs, draw(st.booleans())


@settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(_datasets())
def test_property_round_trip(spec: tuple[np.dtype, list[list[list[int]]], bool]) -> None:
    dtype, docs, multimodal = spec
    arrays = [[np.array(s, dtype=dtype) for s in d] for d in docs]
    modes = [[(len(s) * 7) % 5 for s in d] for d in docs] if multimodal else None
    with tempfile.TemporaryDirectory() as tmp:
        c = write_corpus(os.path.join(tmp, "p"), dtype, arrays, modes)
        for backend in ("mmap", "tensorstore"):
            ds = IndexedDataset(c.prefix, access=DataAccess(backend=backend))
            assert len(ds) == len(c.sequences) and ds.num_documents == len(docs)
            np.testing.assert_array_equal(ds.document_indices, c.document_indices)
            sequences = ds[:] if ds.sequence_modes is None else ds[:][0]
            np.testing.assert_array_equal(np.concatenate(sequences), c.flat)
            for got, want in zip(sequences[: len(ds)], c.sequences, strict=True):
                np.testing.assert_array_equal(got, want)
            if multimodal:
                np.testing.assert_array_equal(ds.sequence_modes, [m for d in modes for m in d])

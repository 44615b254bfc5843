"""Format interop with megatron-core's IndexedDataset, both directions, byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jaxblend.access import DataAccess
from jaxblend.storage import IndexedDataset, IndexedDatasetBuilder

from .conftest import random_docs

torch = pytest.importorskip("torch")
megatron_indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")

pytestmark = [pytest.mark.parity, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float64, np.float32, np.uint16]


def _write_megatron(
    prefix: str,
    dtype: type,
    docs: list[list[np.ndarray]],
    modes: list[list[int]] | None,
    merge: list[str] = (),
) -> None:
    b = megatron_indexed.IndexedDatasetBuilder(
        prefix + ".bin", dtype=dtype, multimodal=modes is not None
    )
    for k, doc in enumerate(docs):
        if modes is None and k % 2:
            tokens = np.concatenate(doc) if doc else np.zeros(0, dtype)
            b.add_document(torch.from_numpy(tokens), [len(s) for s in doc])
            continue
        for j, s in enumerate(doc):
            b.add_item(torch.from_numpy(s), mode=modes[k][j] if modes is not None else 0)
        b.end_document()
    for other in merge:
        b.add_index(other)
    b.finalize(prefix + ".idx")


def _write_ours(
    prefix: str,
    dtype: type,
    docs: list[list[np.ndarray]],
    modes: list[list[int]] | None,
    merge: list[str] = (),
) -> None:
    with IndexedDatasetBuilder(prefix, dtype, multimodal=modes is not None) as b:
        for k, doc in enumerate(docs):
            if modes is None and k % 2:
                b.add_document(
                    np.concatenate(doc) if doc else np.zeros(0, dtype), [len(s) for s in doc]
                )
                continue
            for j, s in enumerate(doc):
                b.add_sequence(s, mode=modes[k][j] if modes is not None else 0)
            b.end_document()
        for other in merge:
            b.merge(other)


def _case(rng: np.random.Generator, dtype: type, multimodal: bool) -> tuple[list, list | None]:
    docs = random_docs(rng, dtype, 10)
    modes = [[int(rng.integers(0, 5)) for _ in d] for d in docs] if multimodal else None
    return docs, modes


def _compare(ours: IndexedDataset, theirs: object, multimodal: bool) -> None:
    np.testing.assert_array_equal(ours.sequence_lengths, theirs.sequence_lengths)
    np.testing.assert_array_equal(ours.sequence_pointers, theirs.index.sequence_pointers)
    np.testing.assert_array_equal(ours.document_indices, theirs.document_indices)
    assert ours.dtype == np.dtype(theirs.index.dtype)
    assert len(ours) == len(theirs)
    if multimodal:
        np.testing.assert_array_equal(ours.sequence_modes, theirs.index.sequence_modes)
    for i in range(len(ours)):
        got = theirs.get(i)
        got = got[0] if multimodal else got
        np.testing.assert_array_equal(ours.get(i), got)
        n = int(ours.sequence_lengths[i])
        if n >= 3:
            part = theirs.get(i, offset=1, length=n - 2)
            part = part[0] if multimodal else part
            np.testing.assert_array_equal(ours.get(i, 1, n - 2), part)
        _assert_same_item(ours[i], theirs[i], multimodal)
    n = len(ours)
    for lo, hi in [(0, n), (1, max(n - 1, 1)), (n // 2, n // 2), (-3, None)]:
        _assert_same_item(ours[lo:hi], theirs[lo:hi], multimodal, sliced=True)
    with pytest.raises(ValueError, match="contiguous"):
        ours[0:n:2]


def _assert_same_item(got, want, multimodal: bool, sliced: bool = False) -> None:
    """Megatron's `dataset[i]` / `dataset[i:j]`: tokens, or `(tokens, modes)` with modes."""
    if multimodal:
        assert isinstance(got, tuple) and len(got) == 2
        np.testing.assert_array_equal(got[1], want[1])
        got, want = got[0], want[0]
    if not sliced:
        got, want = [got], [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("multimodal", [False, True], ids=["plain", "multimodal"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_bytes_identical_and_cross_readable(tmp_path: Path, dtype: type, multimodal: bool) -> None:
    rng = np.random.default_rng(7)
    docs, modes = _case(rng, dtype, multimodal)
    part_docs, part_modes = _case(rng, dtype, multimodal)
    _write_ours(str(tmp_path / "part"), dtype, part_docs, part_modes)
    _write_megatron(str(tmp_path / "meg"), dtype, docs, modes, merge=[str(tmp_path / "part")])
    _write_ours(str(tmp_path / "ours"), dtype, docs, modes, merge=[str(tmp_path / "part")])
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"meg{suffix}").read_bytes()
    # Megatron-written files read here; ours read in Megatron.
    for backend in ("mmap", "tensorstore"):
        _compare(
            IndexedDataset(str(tmp_path / "meg"), access=DataAccess(backend=backend)),
            megatron_indexed.IndexedDataset(str(tmp_path / "ours"), multimodal=multimodal),
            multimodal,
        )


def test_megatron_add_index_of_megatron_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    parts = []
    for k in range(3):
        docs, _ = _case(rng, np.uint16, False)
        _write_megatron(str(tmp_path / f"p{k}"), np.uint16, docs, None)
        parts.append(str(tmp_path / f"p{k}"))
    _write_megatron(str(tmp_path / "meg"), np.uint16, [], None, merge=parts)
    _write_ours(str(tmp_path / "ours"), np.uint16, [], None, merge=parts)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"meg{suffix}").read_bytes()
    _compare(
        IndexedDataset(str(tmp_path / "meg")),
        megatron_indexed.IndexedDataset(str(tmp_path / "meg")),
        False,
    )

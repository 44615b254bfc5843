"""`packing_overflow`: a document longer than a row is cut (default), truncated or dropped."""

from __future__ import annotations

import numpy as np
import pytest

from jaxblend.index import GPTDataConfig, packed_maps, packing


def _epoch(lengths, capacity, overflow):
    lengths = np.asarray(lengths, np.int32)
    return packed_maps.build_packed_epoch(
        lengths, np.arange(lengths.size), capacity, seed=5, window=64, overflow=overflow
    )


def _tokens_by_sequence(m):
    out = {}
    for s, o, n in zip(m.sequence, m.offset, m.length):
        out.setdefault(int(s), []).append((int(o), int(n)))
    return {s: sorted(v) for s, v in out.items()}


def test_truncate_keeps_each_long_document_s_first_row_and_drop_none_of_it():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, 300)
    lengths[[3, 50, 51, 200]] = [41, 100, 32, 77]  # capacity 32: three longer than a row
    cut, trunc, drop = (_epoch(lengths, 32, o) for o in ("cut", "truncate", "drop"))
    long = set(np.flatnonzero(lengths > 32).tolist())
    assert cut.split_documents == trunc.split_documents == drop.split_documents == len(long)
    pieces = _tokens_by_sequence(trunc)
    for s, n in enumerate(lengths.tolist()):
        assert pieces[s] == [(0, min(n, 32))]  # every document once, from its first token
    assert set(_tokens_by_sequence(drop)) == set(range(lengths.size)) - long
    assert int(cut.length.sum()) == int(lengths.sum())
    assert int(trunc.length.sum()) == int(np.minimum(lengths, 32).sum())
    for m in (cut, trunc, drop):
        rows = np.add.reduceat(m.length, m.starts[:-1])
        assert rows.max() <= 32


def test_cut_items_refuses_an_unknown_overflow_policy_and_config_checks():
    cut = packing.cut_items(np.array([5, 70, 3]), 32)
    assert len(packing.cut_items(np.array([5, 70, 3]), 32, "cut")) == len(cut) == 5
    assert len(packing.cut_items(np.array([5, 70, 3]), 32, "truncate")) == 3
    assert len(packing.cut_items(np.array([5, 70, 3]), 32, "drop")) == 2
    with pytest.raises(ValueError, match="packing_overflow must be one of .*, got 'wrap'"):
        packing.cut_items(np.array([5, 70, 3]), 32, "wrap")
    with pytest.raises(ValueError, match="needs packing='best_fit'"):
        GPTDataConfig(blend=["a"], seq_length=8, packing_overflow="truncate")
    packed = GPTDataConfig(blend=["a"], seq_length=8, packing="best_fit")
    truncated = GPTDataConfig(blend=["a"], seq_length=8, packing="best_fit",
                              packing_overflow="truncate")
    assert "packing_overflow" not in packed.packing_fields()  # the default keeps keys
    assert truncated.packing_fields()["packing_overflow"] == "truncate"

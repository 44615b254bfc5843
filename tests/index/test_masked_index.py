"""The BERT/T5 sample index in the index layer: packing, SplitMix64, key, cache hit/miss/corruption."""

from __future__ import annotations

import dataclasses
import logging
import pickle
import shutil

import numpy as np
import pytest

from jaxblend import index
from jaxblend.index import cache, masked_maps, masked_sample_index
from jaxblend.index.masked_sample_index import build_masked_sample_index
from jaxblend.index.splitmix import MASK64, splitmix64

# Sentence lengths of 5 documents (boundaries below): 14 sentences.
BOUNDS = np.array([0, 3, 5, 9, 10, 14], np.int64)
LENGTHS = np.array([5, 7, 2, 9, 4, 3, 8, 6, 5, 2, 7, 7, 3, 9], np.int32)


def _reference_splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def test_splitmix64_known_answers():
    # The first output of a SplitMix64 generator seeded with 0 is a published constant.
    assert int(splitmix64(np.uint64(0))) == 0xE220A8397B1DCDAF
    for x in np.random.default_rng(0).integers(0, 2**63, 50, dtype=np.int64).tolist() + [MASK64]:
        assert int(splitmix64(np.uint64(x))) == _reference_splitmix64(x)


def test_packing_rows_are_pinned():
    # Frozen outputs: the sample index must never change for the same inputs (samples, resume).
    assert build_masked_sample_index(BOUNDS, LENGTHS, 12, 0.5, 1, 42, None).tolist() == [
        [10, 12, 12], [0, 3, 8], [3, 5, 12], [5, 9, 12], [9, 10, 12], [12, 14, 12],
    ]
    rows = build_masked_sample_index(BOUNDS, LENGTHS, 12, 0.3, 2, 42, 20)
    assert rows.tolist() == [
        [12, 14, 12], [10, 12, 12], [10, 12, 12], [12, 14, 12], [3, 5, 12], [5, 9, 12],
        [10, 12, 12], [12, 14, 7], [3, 5, 9], [10, 12, 12], [0, 3, 12], [5, 7, 3], [5, 9, 12],
        [0, 3, 12], [5, 9, 12], [3, 5, 12], [0, 3, 12], [12, 14, 12], [7, 9, 12], [3, 5, 12],
        [0, 3, 12],
    ]


def _reference_pack(bounds, lengths, max_length, short_p, min_sentences, seed, num_samples):
    """Plain-Python twin of the packing rules of docs/format.md, 'BERT/T5 sample index'."""
    threshold = MASK64 if short_p >= 1.0 else min(int(short_p * 2.0**64), MASK64)

    def target(epoch, start):
        key = _reference_splitmix64(_reference_splitmix64(seed) ^ (epoch << 40) ^ start)
        return 2 + _reference_splitmix64(key) % (max_length - 1) if key < threshold else max_length

    rows, epoch = [], 0
    while (num_samples is None and epoch == 0) or (num_samples is not None and len(rows) < num_samples):
        emitted = 0
        for first, last in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if last - first < min_sentences:
                continue
            start, total, count, goal = first, 0, 0, target(epoch, first)
            for s in range(first, last):
                total, count, remaining = total + int(lengths[s]), count + 1, last - s - 1
                if (total >= goal and remaining > 1 and count >= min_sentences) or remaining == 0:
                    rows.append([start, s + 1, goal])
                    emitted += 1
                    start, total, count = s + 1, 0, 0
                    goal = target(epoch, start)
        epoch += 1
        if emitted == 0:
            break
    order = np.random.default_rng([seed, 1]).permutation(len(rows))
    return np.array(rows, np.int64).reshape(-1, 3)[order]


@pytest.mark.parametrize(
    "short_p, min_sentences, num_samples", [(0.0, 1, None), (0.3, 2, None), (1.0, 1, 40), (0.5, 2, 9)]
)
def test_packing_matches_the_reference_twin(short_p, min_sentences, num_samples):
    rng = np.random.default_rng(1)
    bounds = np.concatenate([[0], np.cumsum(rng.integers(1, 7, 60))]).astype(np.int64)
    lengths = rng.integers(1, 20, int(bounds[-1])).astype(np.int32)
    got = build_masked_sample_index(bounds, lengths, 30, short_p, min_sentences, 7, num_samples)
    want = _reference_pack(bounds, lengths, 30, short_p, min_sentences, 7, num_samples)
    np.testing.assert_array_equal(got, want)


def _info(fingerprint="content-a", name="/data/docs"):
    return index.DatasetInfo(name, LENGTHS, BOUNDS, fingerprint)


def _config(**kw):
    fields = {"split": "80,20,0", "seed": 42, "max_length": 12, "short_sequence_probability": 0.5}
    return index.MaskedIndexConfig(**{**fields, **kw})


def test_build_splits_documents_and_packs_them():
    train = index.build_masked_index(_config(), _info(), "train")
    valid = index.build_masked_index(_config(), _info(), "valid")
    # 5 documents at 80/20: documents 0..3 (sentences [0, 10)) and document 4 (sentences [10, 14))
    np.testing.assert_array_equal(
        train.rows, build_masked_sample_index(BOUNDS[:5], LENGTHS, 12, 0.5, 1, 42, None)
    )
    np.testing.assert_array_equal(
        valid.rows, build_masked_sample_index(BOUNDS[4:], LENGTHS, 12, 0.5, 1, 42, None)
    )
    assert train.cache_path is None and len(train) == train.rows.shape[0]
    assert not train.rows.flags.writeable
    assert train.fingerprint != valid.fingerprint


def test_key_covers_what_changes_the_rows_and_nothing_else():
    base = masked_maps.masked_index_key(_config(), _info(), "train")
    changed = [
        masked_maps.masked_index_key(_config(**{field: value}), _info(), "train")
        for field, value in [
            ("split", "70,30,0"),
            ("seed", 43),
            ("max_length", 11),
            ("short_sequence_probability", 0.25),
            ("min_sentences", 2),
            ("num_samples", 30),
        ]
    ]
    changed.append(masked_maps.masked_index_key(_config(), _info("content-b"), "train"))
    changed.append(masked_maps.masked_index_key(_config(), _info(), "valid"))
    assert len({base, *changed}) == len(changed) + 1
    # paths never enter the key: another cache directory or dataset location shares the entry
    assert masked_maps.masked_index_key(_config(cache_dir="/x"), _info(name="/y"), "train") == base


def test_key_covers_the_index_code(monkeypatch):
    base = masked_maps.masked_index_key(_config(), _info(), "train")
    monkeypatch.setattr(cache, "code_digest", lambda: "0" * 32)
    assert masked_maps.masked_index_key(_config(), _info(), "train") != base


def _count_builds(monkeypatch):
    calls = []
    real = masked_sample_index.build_masked_sample_index

    def counting(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(masked_maps, "build_masked_sample_index", counting)
    return calls


def test_cache_miss_then_hit(tmp_path, monkeypatch):
    calls = _count_builds(monkeypatch)
    config = _config(cache_dir=str(tmp_path))
    first = index.build_masked_index(config, _info(), "train")
    assert len(calls) == 1
    assert first.cache_path == str(tmp_path / first.fingerprint)
    assert cache.check(str(tmp_path), first.fingerprint) is None
    # a later start (the arrays of the dataset are never needed) loads the entry memory-mapped
    lazy = index.DatasetInfo("/elsewhere/docs", _fail, _fail, "content-a")
    second = index.build_masked_index(config, lazy, "train", verify="full")
    assert len(calls) == 1
    assert isinstance(second.rows, np.memmap)
    np.testing.assert_array_equal(second.rows, first.rows)
    assert second.fingerprint == first.fingerprint and second.cache_path == first.cache_path
    # changed content misses
    index.build_masked_index(config, _info("content-b"), "train")
    assert len(calls) == 2


def _fail():
    raise AssertionError("the dataset's arrays were read although the cache holds the index")


def test_corrupt_entry_is_moved_aside_and_rebuilt(tmp_path, monkeypatch, caplog):
    config = _config(cache_dir=str(tmp_path))
    first = index.build_masked_index(config, _info(), "train")
    expected = np.array(first.rows)  # the entry is memory-mapped: copy before corrupting it
    path = tmp_path / first.fingerprint / f"{masked_maps.ROWS}.npy"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))
    calls = _count_builds(monkeypatch)
    with caplog.at_level(logging.WARNING):
        again = index.build_masked_index(config, _info(), "train")
    assert len(calls) == 1 and "corrupt" in caplog.text
    np.testing.assert_array_equal(again.rows, expected)
    assert cache.check(str(tmp_path), first.fingerprint) is None


def test_entry_that_is_not_a_sample_index_is_rebuilt(tmp_path, monkeypatch, caplog):
    config = _config(cache_dir=str(tmp_path))
    key = masked_maps.masked_index_key(config, _info(), "train")
    cache.save(str(tmp_path), key, {masked_maps.ROWS: np.zeros((4, 2), np.int32)}, {})
    calls = _count_builds(monkeypatch)
    with caplog.at_level(logging.WARNING):
        built = index.build_masked_index(config, _info(), "train")
    assert len(calls) == 1 and "not a sample index" in caplog.text
    assert built.rows.shape[1] == 3 and built.rows.dtype == np.int64
    assert cache.check(str(tmp_path), key) is None


@pytest.mark.parametrize(
    "kw, split, match",
    [
        ({"split": "100,0,0"}, "valid", "empty under split string"),
        ({"split": "99,1,0"}, "valid", "has no documents"),
        ({"min_sentences": 5}, "train", "yields no samples"),
        ({}, "eval", "split must be one of"),
    ],
)
def test_refusals_name_the_problem(kw, split, match):
    with pytest.raises(ValueError, match=match):
        index.build_masked_index(_config(**kw), _info(), split)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"max_length": 1}, "max_length"),
        ({"seed": -1}, "seed"),
        ({"min_sentences": 0}, "min_sentences"),
        ({"num_samples": 0}, "num_samples"),
        ({"short_sequence_probability": 1.5}, "short_sequence_probability"),
        ({"split": "x"}, "split"),
        ({"cache_dir": "gs://bucket/cache"}, "local directory"),
    ],
)
def test_bad_config(kw, match):
    with pytest.raises(ValueError, match=match):
        _config(**kw)


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _config().seed = 1


def test_pickled_cached_index_reloads_its_entry(tmp_path):
    built = index.build_masked_index(_config(cache_dir=str(tmp_path)), _info(), "train")
    blob = pickle.dumps(built)
    assert len(blob) < 1000  # the entry's name, not its rows
    restored = pickle.loads(blob)
    assert isinstance(restored.rows, np.memmap) and restored.fingerprint == built.fingerprint
    np.testing.assert_array_equal(restored.rows, built.rows)
    shutil.rmtree(built.cache_path)
    with pytest.raises(ValueError, match="vanished or is corrupt"):
        pickle.loads(blob)
    in_memory = index.build_masked_index(_config(), _info(), "train")
    again = pickle.loads(pickle.dumps(in_memory))
    np.testing.assert_array_equal(again.rows, in_memory.rows)
    assert again.cache_path is None and not again.rows.flags.writeable

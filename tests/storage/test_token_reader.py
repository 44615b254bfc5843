"""`TokenReader`: `.bin` token ranges by offset, local and from buckets, opened lazily, versions checked."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend.access import DataAccess, ObjectStoreOptions
from jaxblend.storage import IndexFormatError
from jaxblend.storage.dataset_identity import memo as identity_memo
from jaxblend.storage.token_reader import BinDataset, TokenReader

DTYPES = (np.uint16, np.int32, np.uint16)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("token_reader")
    rng = np.random.default_rng(3)
    prefixes = [
        write_random_dataset(str(root / f"d{i}"), rng, 40, vocab=(0, 60000), dtype=dtype)
        for i, dtype in enumerate(DTYPES)
    ]
    tokens = [np.fromfile(p + ".bin", dtype=dt) for p, dt in zip(prefixes, DTYPES)]
    return prefixes, tokens


def _describe(prefixes, tokens, generations=None):
    return [
        BinDataset(p, np.dtype(dt).str, t.nbytes, None if generations is None else generations[i])
        for i, (p, dt, t) in enumerate(zip(prefixes, DTYPES, tokens))
    ]


def _ranges(tokens, rng, k, datasets=None):
    datasets = range(len(tokens)) if datasets is None else datasets
    ds = rng.choice(list(datasets), k).astype(np.int64)
    length = rng.integers(0, 30, k).astype(np.int64)
    offset = np.array([rng.integers(0, tokens[d].size - n + 1) for d, n in zip(ds, length)], np.int64)
    pos = np.cumsum(length) - length + 3
    return ds, offset, length, pos


def _expected(tokens, ds, offset, length, pos, size):
    out = np.full(size, -1, np.int32)
    for d, o, n, p in zip(ds, offset, length, pos):
        out[p : p + n] = tokens[d][o : o + n]
    return out


def _read(reader, ds, offset, length, pos, size):
    out = np.full(size, -1, np.int32)
    reader.read(ds, offset, length, out, pos)
    return out


def test_local_ranges_equal_the_file_and_open_only_touched(corpus):
    prefixes, tokens = corpus
    reader = TokenReader(_describe(prefixes, tokens), DataAccess())
    rng = np.random.default_rng(0)
    ds, offset, length, pos = _ranges(tokens, rng, 50, datasets=[0, 1])
    size = int((pos + length).max()) + 2
    np.testing.assert_array_equal(
        _read(reader, ds, offset, length, pos, size), _expected(tokens, ds, offset, length, pos, size)
    )
    assert reader.opened == [0, 1]
    assert reader.requests == 0
    assert reader.bytes_read == int(sum(n * np.dtype(DTYPES[d]).itemsize for d, n in zip(ds, length)))
    clone = pickle.loads(pickle.dumps(reader))
    assert clone.opened == []
    ds, offset, length, pos = _ranges(tokens, rng, 50)
    size = int((pos + length).max())
    np.testing.assert_array_equal(
        _read(clone, ds, offset, length, pos, size), _expected(tokens, ds, offset, length, pos, size)
    )


def test_local_checks(corpus, tmp_path):
    prefixes, tokens = corpus
    good = identity_memo.local_version(prefixes[0] + ".bin")[0]
    wrong_version = TokenReader([BinDataset(prefixes[0], "<u2", tokens[0].nbytes, b"x" + good[1:])])
    one = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, np.int64))
    with pytest.raises(IndexFormatError, match=r"d0\.bin was rewritten after the index maps were "
                       r"published .*build_index"):
        wrong_version.read(*one, np.zeros(4, np.int32), np.zeros(1, np.int64))
    TokenReader([BinDataset(prefixes[0], "<u2", tokens[0].nbytes, good)]).read(
        *one, np.zeros(4, np.int32), np.zeros(1, np.int64))
    wrong_size = TokenReader([BinDataset(prefixes[0], "<u2", tokens[0].nbytes + 2)])
    with pytest.raises(IndexFormatError, match=r"d0\.bin is \d+ bytes but the index maps were published for"):
        wrong_size.read(*one, np.zeros(4, np.int32), np.zeros(1, np.int64))
    missing = TokenReader([BinDataset(str(tmp_path / "nothing"), "<u2", 2)])
    with pytest.raises(IndexFormatError, match="nothing.bin: data file does not exist"):
        missing.read(*one, np.zeros(4, np.int32), np.zeros(1, np.int64))
    reader = TokenReader(_describe(prefixes, tokens))
    n = tokens[1].size
    with pytest.raises(IndexError, match=rf"range start={n - 1}, length=2 leaves the {n} tokens of .*d1\.bin"):
        reader.read(np.array([1]), np.array([n - 1]), np.array([2]), np.zeros(4, np.int32), np.zeros(1))
    with pytest.raises(ValueError, match="outside the 4 items"):
        reader.read(np.array([1]), np.array([0]), np.array([2]), np.zeros(4, np.int32), np.array([3]))
    with pytest.raises(ValueError, match="token dtype must be an integer or floating type"):
        BinDataset("x", "|b1", 4)
    assert BinDataset("x", "<f4", 4).num_tokens == 1  # Megatron's `.idx` dtypes include floats
    with pytest.raises(ValueError, match="not a multiple"):
        BinDataset("x", "<u2", 3)


def _generation(server, key):
    return bytes(server.kvstore().read(key).result().stamp.generation)


def test_bucket_ranges_coalesced_counted_and_checked(corpus, object_store, request):
    prefixes, tokens = corpus
    base = f"bin-ranges/{request.node.name}"
    urls = [object_store.upload(p, f"{base}/d{i}") for i, p in enumerate(prefixes)]
    generations = [_generation(object_store, f"{base}/d{i}.bin") for i in range(len(prefixes))]
    access = DataAccess.from_env(object_store=ObjectStoreOptions.from_env(coalesce_gap=64))
    reader = TokenReader(_describe(urls, tokens, generations), access)
    rng = np.random.default_rng(1)
    ds, offset, length, pos = _ranges(tokens, rng, 40, datasets=[0, 2])
    size = int((pos + length).max())
    np.testing.assert_array_equal(
        _read(reader, ds, offset, length, pos, size), _expected(tokens, ds, offset, length, pos, size)
    )
    assert reader.opened == [0, 2]
    assert 2 <= reader.requests <= 40

    # two ranges 10 tokens apart are one request; ranges far apart are two
    before, before_bytes = reader.requests, reader.bytes_read
    out = np.zeros(8, np.int32)
    reader.read(np.array([1, 1]), np.array([0, 14]), np.array([4, 4]), out, np.array([0, 4]))
    np.testing.assert_array_equal(out, np.concatenate([tokens[1][0:4], tokens[1][14:18]]))
    assert reader.requests - before == 1
    assert reader.bytes_read - before_bytes == 18 * 4
    reader.read(np.array([1, 1]), np.array([0, 300]), np.array([4, 4]), out, np.array([0, 4]))
    assert reader.requests - before == 3

    # a published generation that is not the object's: refused, with what to do
    stale = TokenReader(_describe(urls, tokens, [b"1234"] * 3), access)
    with pytest.raises(IndexFormatError) as e:
        _read(stale, ds, offset, length, pos, size)
    message = str(e.value)
    assert "\n" not in message
    assert ".bin was rewritten after the index maps were published (generation " in message
    assert "maps built for 1234): publish the maps again with python -m jaxblend.tools.build_index" in message

    # the object rewritten after the reader saw it (no published generation): refused too
    # (new bytes: an S3 generation is the ETag, the content's MD5)
    loose = TokenReader(_describe(urls, tokens), access)
    _read(loose, ds, offset, length, pos, size)
    object_store.write(f"{base}/d0.bin", Path(prefixes[0] + ".bin").read_bytes()[::-1])  # new content
    with pytest.raises(IndexFormatError, match=r"d0\.bin was rewritten after the index maps were first read"):
        _read(loose, ds, offset, length, pos, size)

    # an object shorter than published: one line saying so
    object_store.write(f"{base}/d2.bin", Path(prefixes[2] + ".bin").read_bytes()[:100])
    short = TokenReader(_describe(urls, tokens), access)
    with pytest.raises(IndexFormatError, match=r"d2\.bin: a read within the \d+ bytes recorded when "
                       r"the maps were published got fewer bytes: .*build_index"):
        short.read(np.array([2]), np.array([200]), np.array([5]), np.zeros(5, np.int32), np.zeros(1))

    clone = pickle.loads(pickle.dumps(reader))
    assert clone.opened == [] and clone.requests == 0
    clone.read(np.array([1]), np.array([3]), np.array([5]), out, np.zeros(1))
    np.testing.assert_array_equal(out[:5], tokens[1][3:8])


def test_local_files_through_tensorstore_backend(corpus):
    prefixes, tokens = corpus
    reader = TokenReader(_describe(prefixes, tokens), DataAccess(backend="tensorstore"))
    rng = np.random.default_rng(5)
    ds, offset, length, pos = _ranges(tokens, rng, 30)
    size = int((pos + length).max())
    np.testing.assert_array_equal(
        _read(reader, ds, offset, length, pos, size), _expected(tokens, ds, offset, length, pos, size)
    )
    assert reader.requests >= 3 and reader.opened == [0, 1, 2]

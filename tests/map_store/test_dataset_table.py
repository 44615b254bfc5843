"""The dataset table of a publication: lines read by range, only those asked for."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

from jaxblend.access import DataAccess
from jaxblend.map_store import dataset_table, record
from jaxblend.storage.object_store.directory import ObjectDirectory
from jaxblend.storage.token_reader import LazyBinDatasets, TokenReader

_ids = itertools.count()
LAUNCH = "l" * 32


def _datasets(n: int) -> list[record.PublishedDataset]:
    return [
        record.PublishedDataset(f"memory://bins/d{k:06d}", "<u2", 200_000 + 2 * k, "0a", f"{k:032x}")
        for k in range(n)
    ]


def _published(n: int, masked=(), body=None) -> tuple[str, record.Publication, DataAccess]:
    """A publication of `n` datasets (head and table) in a fresh memory:// map store."""
    url = f"memory://tables_{next(_ids)}/"
    access = DataAccess()
    table, data = record.encode_table(LAUNCH, _datasets(n), masked, remote=True)
    directory = ObjectDirectory(url, access.object_store)
    directory.write(table.key, data if body is None else body(data))
    split = record.PublishedSplit(5, tuple(range(n)), url + "rows/")
    return url, record.Publication(LAUNCH, "p" * 32, table, {"train": split}), access


def test_runs_round_trip():
    for positions in ([], [0], [0, 1, 2, 7], [5, 4, 3], [2, 2], list(range(1000))):
        assert list(record.from_runs(record.to_runs(positions))) == positions
    assert record.to_runs(range(100_000)) == [[0, 100_000]]
    for bad in ([[3, 3]], [[-1, 2]], [[0, True]], "0-3", [[1]]):
        with pytest.raises(ValueError):
            record.from_runs(bad)


def test_the_head_does_not_grow_with_the_datasets():
    sizes = []
    for n in (10, 10_000):
        url, pub, _ = _published(n)
        sizes.append(len(pub.to_bytes()))
        assert record.Publication.from_bytes(pub.to_bytes(), url) == pub
    assert sizes[1] - sizes[0] <= 12  # a few numbers with more digits


def test_requests_and_bytes_do_not_depend_on_the_table_size():
    seen = []
    for n in (50, 20_000):
        url, pub, access = _published(n)
        reader = dataset_table.TableReader(url, pub, access)
        got = reader.get([3, 17, 40, 41, 3])
        assert [d.prefix for d in got] == [f"memory://bins/d{k:06d}" for k in (3, 17, 40, 41, 3)]
        assert got == [_datasets(n)[k] for k in (3, 17, 40, 41, 3)]
        seen.append((reader.requests, reader.bytes_read))
        reader.get([17, 40])  # held: nothing read again
        assert (reader.requests, reader.bytes_read) == seen[-1]
    assert seen[0] == seen[1]
    requests, nbytes = seen[0]
    assert requests <= 3 and nbytes <= 4 * 41 * pub.table.width  # a few coalesced ranges


def test_far_apart_lines_are_separate_ranges_and_near_ones_one():
    url, pub, access = _published(5000)
    reader = dataset_table.TableReader(url, pub, access)
    reader.get([0, 4999])
    assert reader.requests == 2 and reader.bytes_read == 2 * pub.table.width
    reader.get([10, 11, 12])
    assert reader.requests == 3
    lines = [(d, d + 1) for d in (9, 1, 2, 3, 30)]
    assert dataset_table.merge_runs(lines, 4) == [(1, 4), (9, 10), (30, 31)]
    assert dataset_table.merge_runs(lines, 5) == [(1, 10), (30, 31)]


@pytest.mark.parametrize("damage", ["missing", "truncated", "line", "moved"])
def test_a_bad_table_is_one_line_naming_it(damage):
    bodies = {
        "missing": None,
        "truncated": lambda data: data[: len(data) // 2],
        "line": lambda data: data.replace(b"d000007", b"d000008", 1),
        "moved": lambda data: data[len(data) // 40 :] + data[: len(data) // 40],
    }
    url, pub, access = _published(40, body=bodies[damage])
    if damage == "missing":
        ObjectDirectory(url, access.object_store).write(pub.table.key, None)
    reader = dataset_table.TableReader(url, pub, access)
    with pytest.raises(ValueError) as err:
        reader.get([7, 39])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"dataset table {url}{pub.table.key}: ")
    assert "build_index" in message
    if damage in ("missing", "truncated"):
        assert "missing or truncated" in message
    with pytest.raises(IndexError, match="outside the 40"):
        reader.get([40])


def test_published_bins_describe_only_what_a_read_touches(tmp_path):
    """A token reader over a publication's datasets asks for the datasets of each read, in one
    look-up, and never for the others; names and fingerprints are read only when asked for."""
    n = 300
    local = []
    for k in range(n):
        path = tmp_path / f"d{k}"
        np.arange(k, k + 20, dtype=np.uint16).tofile(f"{path}.bin")
        local.append(record.PublishedDataset(str(path), "<u2", 40, "", f"{k:032x}"))
    url = f"memory://tables_{next(_ids)}/"
    access = DataAccess()
    table, data = record.encode_table(LAUNCH, local, (), remote=False)
    ObjectDirectory(url, access.object_store).write(table.key, data)
    positions = list(reversed(range(n)))  # the split's order is not the table's
    pub = record.Publication(
        LAUNCH, "p" * 32, table, {"train": record.PublishedSplit(5, tuple(positions), url + "r/")}
    )
    bins = dataset_table.PublishedBins(dataset_table.TableReader(url, pub, access), positions)
    assert isinstance(bins, LazyBinDatasets) and len(bins) == n and not bins.remote
    reader = TokenReader(bins, access)
    out = np.zeros(6, np.int32)
    reader.read(np.array([0, 7, 0]), np.array([1, 2, 5]), np.array([2, 2, 2]), out,
                np.array([0, 2, 4]))
    assert out.tolist() == [n, n + 1, n - 6, n - 5, n + 4, n + 5]
    assert bins.described == [0, 7] and bins.requests == 1  # lines 292 and 299: one range
    assert bins.num_tokens[[0, 7, 1]].tolist() == [20, 20, 0]
    with pytest.raises(IndexError, match="leaves the 20 tokens"):
        reader.read(np.array([3]), np.array([19]), np.array([2]), out, np.array([0]))
    again = pickle.loads(pickle.dumps(bins))  # the recipe, not the lines
    assert again.described == [] and again.reader.held == [] and len(again) == n
    assert again[7].prefix == str(tmp_path / f"d{n - 8}")
    assert again.prefixes() == [str(tmp_path / f"d{p}") for p in positions]
    assert again.fingerprints()[str(tmp_path / "d3")] == f"{3:032x}"


def test_loss_masks_come_from_the_head_without_probing(tmp_path):
    url, pub, access = _published(30, masked=(4, 20))
    bins = dataset_table.PublishedBins(dataset_table.TableReader(url, pub, access), [20, 1, 4, 9])
    masks = bins.loss_masks(access)
    assert masks.masked == [True, False, True, False]
    from jaxblend.loss_masks import loss_mask_prefix

    assert masks.masks[0].prefix == loss_mask_prefix("memory://bins/d000020")
    assert masks.masks[0].num_tokens == 100_020
    assert bins.reader.held == list(range(4, 21))  # lines 4 and 20: one coalesced range
    none = dataset_table.PublishedBins(dataset_table.TableReader(url, pub, access), [1, 2])
    assert none.loss_masks(access) is None and none.reader.held == []

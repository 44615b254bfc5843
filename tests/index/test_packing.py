"""The packer (`jaxblend.index.packing`) and packed index maps (`jaxblend.index.packed_maps`)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from helpers_data import dataset_info, three_dataset_infos

from jaxblend import index
from jaxblend.index import blend_schedule, data_maps, packed_maps, packing, row_table
from jaxblend.index import split as split_lib

# ------------------------------------------------------------------------------------ the packer


def _replay_best_fit(lengths, capacity, window, rows):
    """Checks that every item went to the open row with the least room that held it (a new row
    only when none did), replaying the placements in best-fit-decreasing order."""
    row_of = np.empty(len(lengths), np.int64)
    for r in range(len(rows)):
        row_of[rows.pieces[rows.starts[r] : rows.starts[r + 1]]] = r
    room: dict[int, int] = {}
    opened = 0
    for w0 in range(0, len(lengths), window):
        part = lengths[w0 : w0 + window]
        open_rows: dict[int, int] = {}
        for j in np.argsort(-part, kind="stable"):
            i = w0 + int(j)
            r = int(row_of[i])
            fits = [left for left in open_rows.values() if left >= lengths[i]]
            if r in open_rows:
                assert fits and open_rows[r] == min(fits), (i, r)
            else:
                assert not fits and r == opened, (i, r)
                opened += 1
                open_rows[r] = capacity
            open_rows[r] -= int(lengths[i])
            room[r] = open_rows[r]
    assert opened == len(rows)
    assert [capacity - room[r] for r in range(len(rows))] == rows.used.tolist()


@pytest.mark.parametrize("capacity", [32, 9000])  # 9,000: rooms over several summary words
@pytest.mark.parametrize("window", [1, 3, 17, 1000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_best_fit_places_each_item_once_in_the_tightest_open_row(window, seed, capacity):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, capacity + 1, 300)
    rows = packing.best_fit_pack(lengths, capacity, window)
    assert sorted(rows.pieces.tolist()) == list(range(len(lengths)))
    assert int(rows.used.max()) <= capacity
    for r in range(len(rows)):  # pieces of a row in placement order: longest first
        members = lengths[rows.pieces[rows.starts[r] : rows.starts[r + 1]]]
        assert int(members.sum()) == rows.used[r]
        assert (np.diff(members) <= 0).all()
    assert rows.padding(capacity) == len(rows) * capacity - int(lengths.sum())
    _replay_best_fit(lengths, capacity, window, rows)


def test_windows_are_packed_independently():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 20, 100)
    whole = packing.best_fit_pack(lengths, 20, 40)
    first = packing.best_fit_pack(lengths[:40], 20, 40)
    n = len(first)
    assert whole.starts[: n + 1].tolist() == first.starts.tolist()
    assert whole.pieces[: len(first.pieces)].tolist() == first.pieces.tolist()
    assert int(whole.pieces[whole.starts[n]:].min()) >= 40  # later rows hold later items only


def test_best_fit_beats_first_fit_on_padding():
    rng = np.random.default_rng(0)
    capacity = 2049
    lengths = np.minimum(capacity, np.maximum(1, rng.lognormal(6.0, 1.0, 5000).astype(np.int64)))
    rows = packing.best_fit_pack(lengths, capacity, 5000)
    first_fit = packing.first_fit_rows(lengths, capacity)
    ff_rows = int(first_fit.max()) + 1
    assert np.bincount(first_fit, weights=lengths).max() <= capacity
    assert len(rows) < ff_rows
    assert rows.padding(capacity) / (len(rows) * capacity) < 0.01


def test_cut_items_cuts_only_items_longer_than_a_row():
    lengths = np.array([5, 0, 10, 11, 25, 1])
    cut = packing.cut_items(lengths, 10)
    assert cut.item.tolist() == [0, 2, 3, 3, 4, 4, 4, 5]
    assert cut.offset.tolist() == [0, 0, 0, 10, 0, 10, 20, 0]
    assert cut.length.tolist() == [5, 10, 10, 1, 10, 10, 5, 1]
    assert cut.split_items == 2 and len(cut) == 8


@pytest.mark.parametrize("overflow", packing.OVERFLOWS)
@pytest.mark.parametrize(("capacity", "window"), [(10, 1), (10, 7), (64, 50), (3000, 200)])
def test_pack_items_builds_the_rows_of_cut_items_then_best_fit_pack(overflow, capacity, window):
    rng = np.random.default_rng(capacity + window)
    lengths = rng.integers(0, 3 * capacity, 400).astype(np.int32)
    order = rng.permutation(600)[:400] % 400  # items repeated and left out
    cut = packing.cut_items(lengths[order], capacity, overflow)
    rows = packing.best_fit_pack(cut.length, capacity, window)
    packed = packing.pack_items(lengths, capacity, window, overflow, order=order)
    assert packed.starts.tolist() == rows.starts.tolist()
    assert packed.item.tolist() == order[cut.item[rows.pieces]].tolist()
    assert packed.offset.tolist() == cut.offset[rows.pieces].tolist()
    assert packed.length.tolist() == cut.length[rows.pieces].tolist()
    assert packed.split_items == cut.split_items == int((lengths[order] > capacity).sum())
    assert len(packed) == len(rows)
    unordered = packing.pack_items(lengths, capacity, window, overflow)
    again = packing.best_fit_pack(packing.cut_items(lengths, capacity, overflow).length, capacity, window)
    assert unordered.starts.tolist() == again.starts.tolist()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: packing.pack_items(np.array([3, 1]), 10, order=np.array([2])), "order outside"),
        (lambda: packing.pack_items(np.array([-3, 1]), 10), ">= 0"),
        (lambda: packing.pack_items(np.array([3, 1]), 10, window=0), "packing window"),
        (lambda: packing.best_fit_pack(np.array([3, 11]), 10), r"in \[1, 10\]"),
        (lambda: packing.best_fit_pack(np.array([0, 1]), 10), r"in \[1, 10\]"),
        (lambda: packing.best_fit_pack(np.array([1]), 0), "capacity"),
        (lambda: packing.best_fit_pack(np.array([1]), packing.MAX_CAPACITY + 1), "capacity"),
        (lambda: packing.best_fit_pack(np.array([1]), 4, window=0), "packing window"),
        (lambda: packing.cut_items(np.array([-1]), 4), ">= 0"),
        (lambda: packing.cut_items(np.zeros((2, 2)), 4), "1-D"),
    ],
)
def test_packer_refuses_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_empty_input_gives_no_rows():
    rows = packing.best_fit_pack(np.zeros(0, np.int64), 8)
    assert len(rows) == 0 and rows.starts.tolist() == [0] and rows.padding(8) == 0


# ------------------------------------------------------------------------------ packed index maps


def _tokens_by_sequence(split, dataset_id, rows):
    """Tokens each sequence of `dataset_id` contributes to `rows` of its dataset's packed maps, and
    the number of pieces it is cut into."""
    tokens = collections.Counter()
    pieces = collections.Counter()
    first = int(split._offsets[dataset_id, 1])
    for q in rows:
        lo, hi = int(split._starts[first + q]), int(split._starts[first + q + 1])
        for p in range(lo, hi):
            tokens[int(split._sequence[p])] += int(split._piece_length[p])
            pieces[int(split._sequence[p])] += 1
    return tokens, pieces


def packed_config(**kwargs):
    base = {
        "blend": ["/d/a"], "split": "90,10,0", "seq_length": 32, "seed": 5,
        "packing": "best_fit", "packing_window": 64,
    }
    return index.GPTDataConfig(**{**base, **kwargs})


@pytest.mark.parametrize("extra", [True, False])
def test_each_document_once_per_epoch_and_split_only_when_longer_than_a_row(extra):
    infos = three_dataset_infos()
    cfg = packed_config(num_samples=(900, None, None), add_extra_token_to_sequence=extra)
    train = index.build_data_maps(cfg, infos).split("train")
    assert isinstance(train, packed_maps.PackedSplitMaps) and train.is_packed
    capacity = 32 + int(extra)
    lengths = infos["/d/a"].sequence_lengths
    documents = split_lib.split_indices((0.0, 0.9), len(lengths))
    epochs = train.dataset_epoch_rows(0)
    assert len(epochs) >= 2 and len(train) == int(epochs.sum()) >= 900
    start = 0
    for count in epochs:
        tokens, pieces = _tokens_by_sequence(train, 0, range(start, start + int(count)))
        assert {q: tokens[q] for q in tokens} == {
            int(q): int(lengths[q]) for q in documents if lengths[q] > 0
        }
        for q, n in pieces.items():
            assert n == -(-int(lengths[q]) // capacity)  # cut only when longer than a row
        start += int(count)
    split_docs = int((lengths[documents] > capacity).sum())
    assert train.split_documents == [split_docs]
    spans = train.spans(np.arange(len(train)))
    per_row = np.bincount(spans.row, weights=spans.length, minlength=len(train))
    assert per_row.max() <= capacity
    stats = train.packing_stats()
    assert stats["rows"] == len(train)
    assert stats["padding"] == len(train) * capacity - int(per_row.sum())
    assert stats["split_documents"] == split_docs
    assert stats["padding"] < 0.05 * len(train) * capacity


def test_packed_maps_are_fixed_by_the_seed():
    infos = three_dataset_infos()
    ids = np.arange(200)

    def spans(**kwargs):
        s = index.build_data_maps(packed_config(**kwargs), infos).split("train").spans(ids)
        return [a.tolist() for a in (s.row, s.sequence, s.offset, s.length)]

    assert spans() == spans()
    assert spans() != spans(seed=6)
    assert spans() != spans(packing_window=3)


def test_epoch_e_is_the_same_whatever_the_number_of_epochs():
    lengths = np.random.default_rng(1).integers(1, 60, 300)
    docs = np.arange(300)
    one = packed_maps.build_packed_dataset_maps(lengths, docs, None, 33, 9, 50)
    three = packed_maps.build_packed_dataset_maps(lengths, docs, 3 * len(one) - 1, 33, 9, 50)
    assert len(three.epoch_rows) == 3
    n = len(one)
    assert three.starts[: n + 1].tolist() == one.starts.tolist()
    assert three.sequence[: len(one.sequence)].tolist() == one.sequence.tolist()
    assert three.order[:n].tolist() == one.order.tolist()
    second = packed_maps.build_packed_epoch(lengths, docs, 33, blend_schedule.epoch_seed(9, 1), 50)
    assert three.order[n : n + len(second)].tolist() == (second.order + n).tolist()
    lo, hi = int(three.starts[n]), int(three.starts[n + len(second)])
    assert three.sequence[lo:hi].tolist() == second.sequence.tolist()


def test_no_rows_asked_of_an_empty_split_is_refused():
    with pytest.raises(ValueError, match="no tokens"):
        packed_maps.build_packed_dataset_maps(np.array([0, 0]), np.arange(2), 5, 8, 1, name="x")


def test_a_weighted_blend_draws_rows_of_each_packed_dataset():
    infos = three_dataset_infos()
    cfg = packed_config(
        blend=["30", "/d/a", "50", "/d/b", "20", "/d/c"], num_samples=(2000, 100, None)
    )
    maps = index.build_data_maps(cfg, infos)
    train = maps.split("train")
    assert len(train) >= 2000
    drawn = np.bincount(train.dataset_index, minlength=3)
    assert np.allclose(drawn / drawn.sum(), [0.3, 0.5, 0.2], atol=0.01)
    for j in range(3):
        assert int(train.dataset_sample_index[train.dataset_index == j].max()) < train.dataset_length(j)
    spans = train.spans(np.arange(len(train)))
    firsts = np.searchsorted(spans.row, np.arange(len(train)))
    assert spans.dataset[firsts].tolist() == train.dataset_ids(np.arange(len(train))).tolist()
    unweighted = index.build_data_maps(
        packed_config(blend=["/d/a", "/d/b"], num_samples=(None, None, None)), infos
    ).split("train")
    assert len(unweighted) == unweighted.dataset_length(0) + unweighted.dataset_length(1)


def test_a_staged_packed_split_draws_each_stage_from_packed_rows():
    infos = three_dataset_infos()
    schedule = index.BlendSchedule(
        (index.BlendStage(0, ["/d/a"]), index.BlendStage(300, ["50", "/d/b", "50", "/d/c"]))
    )
    cfg = packed_config(train_schedule=schedule, num_samples=(600, 20, None))
    train = index.build_data_maps(cfg, infos).split("train")
    assert isinstance(train, packed_maps.PackedSplitMaps) and len(train) == 600
    assert set(train.dataset_ids(np.arange(300)).tolist()) == {0}
    assert set(train.dataset_ids(np.arange(300, 600)).tolist()) == {1, 2}
    longer = index.build_data_maps(
        packed_config(train_schedule=schedule, num_samples=(900, 20, None)), infos
    ).split("train")
    a, b = train.spans(np.arange(600)), longer.spans(np.arange(600))
    assert a.sequence.tolist() == b.sequence.tolist()  # a longer run keeps its first samples


def test_packing_enters_the_keys_only_when_set():
    infos = three_dataset_infos()
    concat = index.GPTDataConfig(blend=["/d/a"], split="90,10,0", seq_length=32, seed=5)
    assert concat.packing_fields() == {} and not concat.is_packed
    spec = data_maps.DataMapsSpec.resolve(concat, infos)
    assert spec.key == data_maps.plan_fingerprint(concat, spec.prefixes, spec.infos)
    keys = {
        data_maps.DataMapsSpec.resolve(c, infos).key
        for c in (concat, packed_config(), packed_config(packing_window=65))
    }
    assert len(keys) == 3
    history = {
        data_maps.history_fingerprint(c, infos, 10)
        for c in (concat, packed_config(), packed_config(packing_window=65))
    }
    assert len(history) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"packing": "first_fit"}, "packing must be one of .*, got 'first_fit'"),
        ({"packing_window": 0}, "packing_window"),
        ({"seq_length": 1 << 27}, "above what packing='best_fit' takes"),
    ],
)
def test_bad_packing_options_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        packed_config(**kwargs)


def test_row_table_of_packed_maps_gives_the_same_pieces():
    lengths = np.random.default_rng(2).integers(1, 80, 120)
    infos = {"/d/a": dataset_info("/d/a", lengths)}
    train = index.build_data_maps(packed_config(num_samples=(300, None, None)), infos).split("train")
    table = row_table.build_row_table(train, chunk=7)
    ids = np.array([5, 0, 299, 5, 17])
    got = row_table.spans_of_rows(0, *(table[f] for f in row_table.FIELDS), ids)
    want = train.spans(ids)
    starts = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))])
    assert got.row.tolist() == want.row.tolist()
    assert got.length.tolist() == want.length.tolist()
    assert got.offset.tolist() == (starts[want.sequence] + want.offset).tolist()
    with pytest.raises(ValueError, match="packed"):
        train.constituent(0)
    rows = train.dataset_rows(0)
    assert len(rows) == len(train) and rows.starts[0] == 0
    assert sorted(rows.order.tolist()) == list(range(len(train)))
    spans = train.spans(np.arange(len(train)))
    in_samples = np.concatenate(
        [np.arange(rows.starts[q], rows.starts[q + 1]) for q in rows.order]
    )
    assert rows.sequence[in_samples].tolist() == spans.sequence.tolist()
    assert rows.length[in_samples].tolist() == spans.length.tolist()

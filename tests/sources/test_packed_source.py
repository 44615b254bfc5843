"""Packed rows through `GPTSource` (`--packing=best_fit`): the batch schema of whole documents."""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import identity, index
from jaxblend.access import DataAccess
from jaxblend.sources import GPTSchemaOptions, GPTSource, open_gpt_sources, packed_schema, schema
from jaxblend.storage import IndexedDataset

EOD = 0
S = 16


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    rng = np.random.default_rng(11)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(1, 40), vocab=(1, 500), eod=EOD)
        for n, d in (("a", 150), ("b", 90))
    ]


def config(blend, samples=(None, None, None), extra=True, **kwargs):
    return index.GPTDataConfig(
        blend=blend, split="90,10,0", seq_length=S, seed=3, num_samples=samples,
        add_extra_token_to_sequence=extra, packing="best_fit", packing_window=40, **kwargs,
    )


def source_of(cfg, split="train", **options):
    opts = GPTSchemaOptions(**options)
    return open_gpt_sources(cfg, opts, access=DataAccess())[split]


def _documents(source, ids):
    """Each row's pieces as (sequence, offset, length) from the split maps."""
    spans = source.span_index.maps.spans(ids)
    rows = collections.defaultdict(list)
    for r, d, q, o, n in zip(spans.row, spans.dataset, spans.sequence, spans.offset, spans.length):
        rows[int(r)].append((int(d), int(q), int(o), int(n)))
    return rows


@pytest.mark.parametrize("extra", [True, False])
def test_rows_hold_whole_documents_with_their_own_positions_and_targets(prefixes, extra):
    cfg = config([prefixes[0]], extra=extra)
    source = source_of(cfg)
    dataset = IndexedDataset(prefixes[0])
    ids = np.arange(len(source))
    batch = source.get_batch(ids)
    window = S + int(extra)
    seen = collections.Counter()
    for r, pieces in _documents(source, ids).items():
        a = 0
        for seg, (_, q, o, n) in enumerate(pieces, start=1):
            tokens = np.asarray(dataset[q][o : o + n], np.int32)
            seen[q] += n
            span = slice(a, min(a + n, S))
            if a < S:
                assert batch["inputs"][r, span].tolist() == tokens[: span.stop - a].tolist()
                assert batch["positions"][r, span].tolist() == list(range(span.stop - a))
                assert set(batch["segment_ids"][r, span].tolist()) == {seg}
                inner = [p for p in range(a, span.stop) if p + 1 < a + n]
                assert batch["targets"][r, inner].tolist() == tokens[1 : len(inner) + 1].tolist()
                assert (batch["loss_mask"][r, inner] == 1).all()
                ends = [p for p in range(a, span.stop) if p + 1 >= a + n]  # no next-document target
                assert (batch["loss_mask"][r, ends] == 0).all()
                assert (batch["targets"][r, ends] == 0).all()
            a += n
        assert a <= window
        assert (batch["loss_mask"][r, min(a, S):] == 0).all()
        assert (batch["segment_ids"][r, min(a, S):] == 0).all()
        assert (batch["inputs"][r, min(a, S):] == 0).all()
    lengths = dataset.sequence_lengths
    documents = index.split.split_indices((0.0, 0.9), len(lengths))
    assert dict(seen) == {int(q): int(lengths[q]) for q in documents}  # once per epoch
    trained = int(batch["loss_mask"].sum())
    cut = sum(-(-int(lengths[q]) // window) for q in documents)
    assert trained == sum(int(lengths[q]) for q in documents) - cut


def test_eod_masking_follows_each_convention(prefixes):
    cfg = config([prefixes[0]])
    ids = np.arange(40)
    own = source_of(cfg, eod_id=EOD, eod_mask_loss=True).get_batch(ids)
    meg = source_of(cfg, eod_id=EOD, eod_mask_loss=True, megatron_compat=True).get_batch(ids)
    plain = source_of(cfg).get_batch(ids)
    assert (own["loss_mask"][own["targets"] == EOD] == 0).all()
    assert own["loss_mask"].sum() < plain["loss_mask"].sum()
    real = plain["segment_ids"] > 0
    assert (meg["loss_mask"][(meg["inputs"] == EOD) & real] == 0).all()
    for key in ("inputs", "targets"):
        assert (own[key] == plain[key]).all() and (meg[key] == plain[key]).all()


def test_cu_seqlens_match_the_segments_and_padding_is_folded_with_megatron_compat(prefixes):
    cfg = config([prefixes[0]])
    ids = np.arange(60)
    own = source_of(cfg, inter_document_masking=True).get_batch(ids)
    meg = source_of(cfg, inter_document_masking=True, megatron_compat=True).get_batch(ids)
    assert (own["cu_seqlens"] == meg["cu_seqlens"]).all()
    padded = 0
    for r in range(len(ids)):
        seg = meg["segment_ids"][r]
        starts = [0] + [p for p in range(1, S) if seg[p] != seg[p - 1]]
        m = len(starts)
        assert own["cu_seqlens"][r, :m].tolist() == starts
        assert (own["cu_seqlens"][r, m:] == S).all()
        assert own["max_seqlen"][r] == max(np.diff(own["cu_seqlens"][r, : m + 1]))
        pad = own["segment_ids"][r] == 0
        if pad.any():
            padded += 1
            assert (meg["segment_ids"][r, pad] == seg[~pad][-1]).all()
            assert (np.diff(meg["positions"][r][pad]) == 1).all()
            assert (own["positions"][r, pad] == 0).all()
        assert (own["positions"][r][~pad] == meg["positions"][r][~pad]).all()
    assert padded > 0


def test_same_batches_from_a_second_build_and_a_pickled_source(prefixes):
    cfg = config(["60", prefixes[0], "40", prefixes[1]], samples=(300, 20, None))
    a, b = source_of(cfg, inter_document_masking=True), source_of(cfg, inter_document_masking=True)
    ids = np.array([7, 299, 0, 7, 150])
    assert a.fingerprint == b.fingerprint
    clone = pickle.loads(pickle.dumps(b))
    for got in (b.get_batch(ids), clone.get_batch(ids)):
        want = a.get_batch(ids)
        assert sorted(got) == sorted(want)
        assert all(got[k].tobytes() == want[k].tobytes() for k in want)
    assert a.get_batch(ids)["dataset_ids"].tolist() == list(a.span_index.maps.dataset_ids(ids))
    concat = index.GPTDataConfig(
        blend=["60", prefixes[0], "40", prefixes[1]], split="90,10,0", seq_length=S, seed=3,
        num_samples=(300, 20, None),
    )
    assert source_of(concat).fingerprint != a.fingerprint


def test_packing_is_the_configuration_s(prefixes):
    source = open_gpt_sources(config([prefixes[0]]), GPTSchemaOptions(), access=DataAccess())
    assert source["train"].packing == "best_fit"
    options = GPTSchemaOptions()
    raw = schema.raw_windows(
        np.zeros((1, S + 1), np.int32), np.array([3]), np.zeros(1, np.int32), np.zeros(1)
    )
    with pytest.raises(ValueError, match="mock data cannot be packed"):
        packed_schema.assemble_packed(raw, options, seq_length=S)
    with pytest.raises(ValueError, match="packing must be one of .*, got 'x'"):
        GPTSource(source["train"].span_index, options, seq_length=S, packing="x", fingerprint="f")
    with pytest.raises(ValueError, match="packing must be one of .*, got 'x'"):
        index.GPTDataConfig(blend=["a"], seq_length=S, packing="x")
    assert options.identity_fields(S, True)["packing"] is identity.OMIT
    assert options.identity_fields(S, True, "best_fit")["packing"] == "best_fit"

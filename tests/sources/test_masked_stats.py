"""Masked-LM statistics agree with Megatron-Core's BERT/T5 datasets on the same .bin/.idx.

Bit parity is not the goal (different RNGs); the distributions are. Both implementations read the
same sentence-split documents (fake WordPiece vocabulary: ids divisible by 3 are "##" pieces), one
epoch of the train split, and we compare: samples per epoch, real sequence lengths, realized mask
rate, the 80/10/10 split, the length distribution of masked runs (n-grams), the sentence-order
swap rate, and for T5 the number of spans and the decoder length.

Tolerances: means are compared within 4 standard errors of their difference (computed from the two
samples, so the test fails on a real shift, not on noise) plus a small allowance where the two
implementations differ on purpose (documented in jaxblend.sources.masked_base); distributions
within a total-variation distance of 0.04 (with several thousand runs, noise is ~0.01).
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from masked_testdata import MASK, SENTINELS, tokenizer_info, vocab, write_documents

from jaxblend.sources import BERTMaskedConfig, BERTSource, T5MaskedConfig, T5Source

pytestmark = pytest.mark.parity

SEQ = 96
NUM_DOCS = 1000


class FakeWordPieceTokenizer:
    """The attributes Megatron-Core's masked datasets read from a tokenizer."""

    def __init__(self):
        names = vocab()
        info = tokenizer_info()
        self.vocab = {t: i for i, t in enumerate(names)}
        self.inv_vocab = dict(enumerate(names))
        self.vocab_size = len(names)
        self.cls, self.sep, self.mask, self.pad = info.cls, info.sep, info.mask, info.pad
        self.bos, self.eos = info.bos, info.eos
        self.additional_special_tokens_ids = list(SENTINELS)
        self.unique_identifiers = collections.OrderedDict(
            cls="FakeWordPieceTokenizer", size=self.vocab_size
        )


@pytest.fixture(scope="module")
def megatron_env(tmp_path_factory):
    pytest.importorskip("megatron.core")
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    root = tmp_path_factory.mktemp("masked_stats")
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=0, world_size=1)
    prefix = str(root / "docs")
    write_documents(prefix, NUM_DOCS, seed=21)
    yield prefix, str(root / "cache")
    del torch


def megatron_dataset(kind, prefix, cache, **kw):
    from megatron.core.datasets import bert_dataset, t5_dataset
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    common = {
        "random_seed": 1234,
        "sequence_length": SEQ,
        "blend": ([prefix], None),
        "split": "100,0,0",
        "path_to_cache": cache,
        "tokenizer": FakeWordPieceTokenizer(),
        "masking_probability": 0.15,
        "short_sequence_probability": 0.1,
        "masking_max_ngram": 3,
        "masking_do_full_word": True,
        "masking_do_permutation": False,
        "masking_use_longer_ngrams": False,
        "masking_use_geometric_distribution": False,
    }
    common.update(kw)
    ds = IndexedDataset(prefix)
    docs = np.arange(ds.document_indices.shape[0] - 1, dtype=np.int32)
    # num_samples=1: build_mapping completes whole epochs until it has 1 sample = exactly one epoch
    # (None, meaning one epoch, fails inside megatron-core 0.16.1's build_mapping call)
    if kind == "bert":
        config = bert_dataset.BERTMaskedWordPieceDatasetConfig(classification_head=True, **common)
        return bert_dataset.BERTMaskedWordPieceDataset(ds, prefix, docs, 1, Split.train, config)
    config = t5_dataset.T5MaskedWordPieceDatasetConfig(sequence_length_decoder=48, **common)
    return t5_dataset.T5MaskedWordPieceDataset(ds, prefix, docs, 1, Split.train, config)


def ours(kind, prefix, **kw):
    common = {"random_seed": 1234, "sequence_length": SEQ, "split": "100,0,0"}
    common.update(kw)
    if kind == "bert":
        return BERTSource(
            prefix, BERTMaskedConfig(classification_head=True, **common), tokenizer_info()
        )
    return T5Source(prefix, T5MaskedConfig(sequence_length_decoder=48, **common), tokenizer_info())


def megatron_batch(dataset, n):
    items = [dataset[i] for i in range(n)]
    return {k: np.stack([np.asarray(it[k]) for it in items]) for k in items[0]}


def assert_close_means(a, b, what, allowance=0.0):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    se = np.sqrt(a.var() / a.size + b.var() / b.size)
    diff = abs(a.mean() - b.mean())
    assert diff <= 4 * se + allowance, (
        f"{what}: jaxblend {a.mean():.4f} vs megatron {b.mean():.4f} (4 SE = {4 * se:.4f})"
    )


def run_lengths(loss_mask):
    """Histogram (fractions) of lengths of runs of consecutive predicted positions, capped at 8."""
    m = np.asarray(loss_mask) > 0
    counts = collections.Counter()
    for row in m:
        padded = np.concatenate([[False], row, [False]])
        edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
        for lo, hi in zip(edges[::2], edges[1::2]):
            counts[min(int(hi - lo), 8)] += 1
    total = sum(counts.values())
    return np.array([counts[k] / total for k in range(1, 9)]), total


def test_bert_statistics_match_megatron(megatron_env):
    prefix, cache = megatron_env
    theirs_ds = megatron_dataset("bert", prefix, cache)
    mine = ours("bert", prefix)
    assert abs(len(mine) - len(theirs_ds)) <= 0.03 * len(theirs_ds)
    n = min(len(mine), len(theirs_ds), 1500)
    theirs = megatron_batch(theirs_ds, n)
    ours_b = mine.get_batch(np.arange(n))

    their_real = (theirs["padding_mask"] == 1).sum(axis=1)
    our_real = ours_b["padding_mask"].sum(axis=1)
    assert_close_means(our_real, their_real, "real tokens per sample")

    their_rate = theirs["loss_mask"].sum(axis=1) / their_real
    our_rate = ours_b["loss_mask"].sum(axis=1) / our_real
    assert_close_means(our_rate, their_rate, "mask rate")

    their_sel = theirs["loss_mask"] > 0
    our_sel = ours_b["loss_mask"] > 0
    assert_close_means(
        ours_b["tokens"][our_sel] == MASK, theirs["text"][their_sel] == MASK, "[MASK] share"
    )
    assert_close_means(
        ours_b["tokens"][our_sel] == ours_b["labels"][our_sel],
        theirs["text"][their_sel] == theirs["labels"][their_sel],
        "unchanged share",
    )

    ours_hist, n_ours = run_lengths(ours_b["loss_mask"])
    theirs_hist, n_theirs = run_lengths(theirs["loss_mask"])
    assert min(n_ours, n_theirs) > 1000
    assert 0.5 * np.abs(ours_hist - theirs_hist).sum() < 0.04, (ours_hist, theirs_hist)

    assert_close_means(ours_b["sop_label"], theirs["is_random"], "sentence-order swap rate")
    their_types = theirs["types"].sum(axis=1)
    assert_close_means(ours_b["types"].sum(axis=1), their_types, "segment B length")


@pytest.mark.parametrize("option", ["geometric", "longer"])
def test_bert_ngram_options_match_megatron(megatron_env, option):
    prefix, cache = megatron_env
    kw = (
        {"masking_use_geometric_distribution": True, "masking_max_ngram": 6}
        if option == "geometric"
        else {"masking_use_longer_ngrams": True}
    )
    kw["masking_do_full_word"] = False
    theirs_ds, mine = megatron_dataset("bert", prefix, cache, **kw), ours("bert", prefix, **kw)
    n = min(len(theirs_ds), len(mine), 600)
    theirs = megatron_batch(theirs_ds, n)
    ours_b = mine.get_batch(np.arange(n))
    ours_hist, _ = run_lengths(ours_b["loss_mask"])
    theirs_hist, _ = run_lengths(theirs["loss_mask"])
    assert 0.5 * np.abs(ours_hist - theirs_hist).sum() < 0.05, (ours_hist, theirs_hist)
    assert_close_means(
        ours_b["loss_mask"].sum(axis=1) / ours_b["padding_mask"].sum(axis=1),
        theirs["loss_mask"].sum(axis=1) / (theirs["padding_mask"] == 1).sum(axis=1),
        "mask rate",
    )


def test_t5_statistics_match_megatron(megatron_env):
    prefix, cache = megatron_env
    theirs_ds = megatron_dataset("t5", prefix, cache)
    mine = ours("t5", prefix)
    assert abs(len(mine) - len(theirs_ds)) <= 0.03 * len(theirs_ds)
    n = min(len(mine), len(theirs_ds), 1500)
    theirs = megatron_batch(theirs_ds, n)
    ours_b = mine.get_batch(np.arange(n))
    sentinels = np.asarray(SENTINELS)
    assert_close_means(
        ours_b["encoder_padding_mask"].sum(axis=1), theirs["enc_mask"].sum(axis=1), "encoder length"
    )
    assert_close_means(
        ours_b["decoder_padding_mask"].sum(axis=1), theirs["dec_mask"].sum(axis=1), "decoder length"
    )
    assert_close_means(
        np.isin(ours_b["encoder_tokens"], sentinels).sum(axis=1),
        np.isin(theirs["text_enc"], sentinels).sum(axis=1),
        "spans per sample",
    )
    assert_close_means(
        ours_b["loss_mask"].sum(axis=1), theirs["loss_mask"].sum(axis=1), "decoder targets"
    )

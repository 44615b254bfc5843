"""Batches with `megatron_compat` equal Megatron-Core's `GPTDataset.__getitem__`, every option.

For each combination of reset_position_ids, reset_attention_mask, eod_mask_loss and
add_extra_token_to_sequence, with and without a pad token, every sample of the train split and of a
validation split whose last sample is partial (padded) is compared: inputs/targets/loss_mask/
positions with tokens/labels/loss_mask/position_ids, and the attention implied by segment_ids with
Megatron's attention_mask.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import index
from jaxblend.sources import GPTSchemaOptions, MockSource, open_gpt_sources

EOD = 3
PAD = 7  # a real token id of the data: Megatron masks labels equal to it and zeroes it
SEQ = 16


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    root = tmp_path_factory.mktemp("getitem")
    rng = np.random.default_rng(5)  # the valid split ends in a partial sample (both extras)
    return write_random_dataset(str(root / "a"), rng, 60, lengths=(1, 40), vocab=(1, 12), eod=EOD)


def _megatron(prefix, extra, reset_pos, reset_attn, eod_mask, pad, samples, cache):
    # `cache`: a fresh directory per call. Megatron's default cache (next to the data) is keyed by
    # a hash that omits add_extra_token_to_sequence, so a shared one would hand back wrong maps.
    pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    class Tok:
        eod = EOD
        unique_identifiers = {"class": "Tok"}  # noqa: RUF012 - megatron reads a dict
        vocab_size = 100

    if pad is not None:
        Tok.pad = pad
    cfg = GPTDatasetConfig(
        random_seed=11,
        sequence_length=SEQ,
        blend=([prefix], None),
        split="80,20,0",
        path_to_cache=cache,
        tokenizer=Tok(),
        reset_position_ids=reset_pos,
        reset_attention_mask=reset_attn,
        eod_mask_loss=eod_mask,
        create_attention_mask=True,
        add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=False,
    )
    return BlendedMegatronDatasetBuilder(GPTDataset, samples, lambda: True, cfg).build()


def _ours(prefix, extra, reset_pos, reset_attn, eod_mask, pad, samples, cache=None):
    cfg = index.GPTDataConfig(
        blend=[prefix],
        split="80,20,0",
        seq_length=SEQ,
        seed=11,
        num_samples=samples,
        add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=False,
    )
    opts = GPTSchemaOptions(
        eod_id=EOD,
        eod_mask_loss=eod_mask,
        reset_position_ids=reset_pos,
        reset_attention_mask=reset_attn,
        megatron_compat=True,
        pad_id=pad,
    )
    return open_gpt_sources(cfg, opts)


def _attention(segment_ids):
    """Allowed (query, key) pairs: causal and same segment."""
    s = segment_ids.shape[0]
    causal = np.tril(np.ones((s, s), dtype=bool))
    return causal & (segment_ids[:, None] == segment_ids[None, :])


@pytest.mark.parity
@pytest.mark.parametrize(
    "extra,reset_pos,reset_attn,eod_mask", list(itertools.product([True, False], repeat=4))
)
@pytest.mark.parametrize("pad", [None, PAD])
def test_batches_equal_megatron_getitem(
    prefix, tmp_path, extra, reset_pos, reset_attn, eod_mask, pad
):
    samples = [40, None, None]  # valid: one epoch, its last sample partial (kept, padded)
    args = (prefix, extra, reset_pos, reset_attn, eod_mask, pad, samples, str(tmp_path))
    theirs = _megatron(*args)
    ours = _ours(*args)
    padded_rows = 0
    for split, mds in zip(("train", "valid"), theirs[:2]):
        src = ours[split]
        assert len(src) == len(mds)
        batch = src.get_batch(np.arange(len(src)))
        _, n_valid = src.windows(np.arange(len(src)))
        padded_rows += int((n_valid < SEQ + extra).sum())
        for i in range(len(mds)):
            m = mds[i]
            np.testing.assert_array_equal(batch["inputs"][i], m["tokens"].numpy(), f"{split} {i}")
            np.testing.assert_array_equal(batch["targets"][i], m["labels"].numpy())
            want = batch["loss_mask"][i]
            if pad is not None and not (reset_pos or reset_attn or eod_mask):
                # Megatron quirk: with nothing to recompute it caches the first sample's
                # loss_mask *after* zeroing that sample's pad labels in place, so every later
                # sample also carries the first one's pad positions (per dataset, per worker).
                want = want * batch["loss_mask"][0]
            np.testing.assert_array_equal(want, m["loss_mask"].numpy())
            np.testing.assert_array_equal(batch["positions"][i], m["position_ids"].numpy())
            allowed = ~m["attention_mask"][0].numpy()
            np.testing.assert_array_equal(_attention(batch["segment_ids"][i]), allowed)
    assert padded_rows >= 1  # the partial last validation sample was compared too


@pytest.mark.parity
def test_default_loss_mask_departs_from_megatron_where_documented(prefix, tmp_path):
    # jaxblend's own convention masks where the *target* is EOD; Megatron where the *input* is.
    cfg = index.GPTDataConfig(
        blend=[prefix], split="80,20,0", seq_length=SEQ, seed=11, num_samples=(40, None, None)
    )
    own = open_gpt_sources(cfg, GPTSchemaOptions(eod_id=EOD, eod_mask_loss=True))
    batch = own["train"].get_batch(np.arange(len(own["train"])))
    assert np.all(batch["loss_mask"][batch["targets"] == EOD] == 0)
    mds = _megatron(prefix, True, False, False, True, None, [40, None, None], str(tmp_path))[0]
    m = mds[0]
    np.testing.assert_array_equal(batch["inputs"][0], m["tokens"].numpy())
    theirs = np.stack([mds[i]["loss_mask"].numpy() for i in range(len(mds))])
    assert not np.array_equal(batch["loss_mask"], theirs)


def _reference_documents(mds, i, extra):
    """Per-document lengths of Megatron sample i (as megatron-core >= 0.19 computes them)."""
    j = mds.shuffle_index[i]
    (b, bo), (e, eo) = mds.sample_index[j], mds.sample_index[j + 1]
    sizes = mds.dataset.sequence_lengths
    docs = mds.document_index
    if b == e:
        lengths = [min(eo - bo + extra, sizes[docs[b]] - bo)]
    else:
        lengths = []
        for k in range(b, e + 1):
            start = bo if k == b else 0
            stop = sizes[docs[k]] if k < e else min(eo + extra, sizes[docs[k]])
            lengths.append(int(stop - start))
    if extra:
        lengths[-1] -= 1
        if lengths[-1] == 0:
            lengths.pop()
    short = SEQ - sum(lengths)
    if short > 0:
        if lengths:
            lengths[-1] += short
        else:
            lengths.append(short)
    return [int(x) for x in lengths]


@pytest.mark.parity
@pytest.mark.parametrize("extra", [True, False])
def test_inter_document_masking_semantics(prefix, tmp_path, extra):
    # megatron-core 0.16.1 has no inter_document_masking; the reference applies its documented
    # rules (megatron-core >= 0.19) to the sample pieces of the installed GPTDataset.
    mds = _megatron(prefix, extra, False, False, False, None, [40, None, None], str(tmp_path))[1]
    cfg = index.GPTDataConfig(
        blend=[prefix],
        split="80,20,0",
        seq_length=SEQ,
        seed=11,
        num_samples=(40, None, None),
        add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=False,
    )
    opts = GPTSchemaOptions(eod_id=EOD, megatron_compat=True, inter_document_masking=True)
    src = open_gpt_sources(cfg, opts)["valid"]
    batch = src.get_batch(np.arange(len(src)))
    for i in range(len(mds)):
        lengths = _reference_documents(mds, i, int(extra))
        cu = np.full(SEQ + 1, SEQ, np.int32)
        cu[: len(lengths) + 1] = np.cumsum([0, *lengths])
        np.testing.assert_array_equal(batch["cu_seqlens"][i], cu, f"sample {i}")
        assert batch["max_seqlen"][i] == max(lengths)
        positions = np.concatenate([np.arange(n) for n in lengths])
        np.testing.assert_array_equal(batch["positions"][i], positions)
        np.testing.assert_array_equal(batch["inputs"][i], mds[i]["tokens"].numpy())


def test_inter_document_masking_without_pieces_uses_eod():
    opts = GPTSchemaOptions(eod_id=5, inter_document_masking=True, megatron_compat=True)
    src = MockSource(4, opts, seq_length=8, vocab_size=6, mean_doc_length=3)
    b = src.get_batch(np.arange(4))
    for r in range(4):
        ends = np.flatnonzero(src.windows(np.array([r]))[0][:8] == 5) + 1
        want = [0, *[int(e) for e in ends if e < 8], 8]
        assert b["cu_seqlens"][r][: len(want)].tolist() == want
        assert (b["cu_seqlens"][r][len(want) :] == 8).all()


def test_inter_document_masking_keeps_jaxblend_padding_convention():
    from jaxblend.sources.schema import windows_to_batch

    text = np.array([[5, 6, 3, 7, 8, -1, -1, -1, -1]], np.int32)  # 5 real tokens of 9 (S=8 + 1)
    opts = GPTSchemaOptions(eod_id=3, inter_document_masking=True)
    b = windows_to_batch(text, np.array([5]), opts, (np.array([0, 0]), np.array([3, 2])), seq_length=8)
    assert b["cu_seqlens"][0].tolist() == [0, 3, 8, 8, 8, 8, 8, 8, 8]  # padding folded into doc 2
    assert b["positions"][0].tolist() == [0, 1, 2, 0, 1, 0, 0, 0]
    assert b["segment_ids"][0].tolist() == [1, 1, 1, 2, 2, 0, 0, 0]
    compat = GPTSchemaOptions(eod_id=3, inter_document_masking=True, megatron_compat=True)
    b = windows_to_batch(text, np.array([5]), compat, (np.array([0, 0]), np.array([3, 2])), seq_length=8)
    assert b["positions"][0].tolist() == [0, 1, 2, 0, 1, 2, 3, 4]  # Megatron: runs on

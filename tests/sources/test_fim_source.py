"""Fill-in-the-middle on the GPT data path: `GPTSchemaOptions(fim=...)` through `open_gpt_sources`.

The windows are the plain GPT windows rewritten sample by sample; the result depends only on
(seed, split, sample id): not on the batch a sample is read in, the order, a pickled copy (a Grain
worker) or a second opening. The tokenizer and its sentinels come from the data's record.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil

import numpy as np
import pytest

from jaxblend import index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.preprocess import tokenizer_spec as tok_spec
from jaxblend.sources import GPTSchemaOptions, open_gpt_sources
from jaxblend.sources.fim import FIMOptions, fit, sample_draws
from tests.helpers_fim import two_code_datasets

SEQ = 32


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return two_code_datasets(tmp_path_factory.mktemp("fim_source"), n=120, n_more=80)


def _config(blend, samples=(96, 16, 16), seed=5):
    return index.GPTDataConfig(
        blend=blend, split="90,5,5", seq_length=SEQ, seed=seed, num_samples=samples,
    )


def _open(data, fim=None, blend=None, split="train", **schema):
    access = DataAccess(maps=MapStoreOptions(location=str(data["root"] / "maps")))
    options = GPTSchemaOptions(fim=fim, **schema)
    return open_gpt_sources(_config(blend or [data["prefix"]]), options, access=access)[split]


@pytest.mark.parametrize("compat", [True, False])
def test_windows_are_the_plain_windows_rewritten_per_sample(data, compat):
    fim = FIMOptions(rate=0.8, spm_rate=0.5)
    plain = _open(data, megatron_compat=compat)
    src = _open(data, fim, megatron_compat=compat)
    ids = np.arange(len(src))
    text, n_valid = plain.windows(ids)
    raw = src.read_batch(ids)
    rewriter, pad = src.transform.rewriter(), src.transform.tokens.pad
    changed = 0
    for r, i in enumerate(ids):
        window = text[r, : n_valid[r]]
        whole = rewriter.sample(window, sample_draws(5, "train", int(i)))
        expected = fit(whole, window.size, pad if compat else None)
        got = raw["text"][r, : raw["n_valid"][r]]
        np.testing.assert_array_equal(got, expected)
        assert (raw["text"][r, raw["n_valid"][r]:] == -1).all()
        changed += int(not np.array_equal(got, window))
        if compat:
            assert raw["n_valid"][r] == n_valid[r]  # padded back to the sample's length
        else:
            assert raw["n_valid"][r] <= n_valid[r]  # the shortfall is batch padding
    assert changed > len(ids) // 2  # rate 0.8: most rows are rewritten
    batch = src.assemble_batch(raw)
    sentinels = np.isin(batch["inputs"], [src.transform.tokens.prefix, src.transform.tokens.suffix])
    assert sentinels.any()


class _CountingTokenizer:
    """A tokenizer that counts its encode calls and the texts it encodes one by one."""

    def __init__(self, inner):
        self.inner, self.calls, self.texts = inner, 0, []

    def tokenize_batch(self, texts):
        self.calls += 1
        self.texts += list(texts)
        return self.inner.tokenize_batch(texts)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_batch_is_encoded_in_one_call_with_the_ids_of_separate_encodings(data):
    src = _open(data, FIMOptions(rate=0.8, spm_rate=0.5))
    ids = np.arange(len(src))
    whole = src.read_batch(ids)
    counting = _CountingTokenizer(src.transform.tokenizer)
    src.transform._tokenizer = counting
    again = src.read_batch(ids)
    assert counting.calls == 1 and len(counting.texts) % 3 == 0 and len(counting.texts) > 30
    np.testing.assert_array_equal(again["text"], whole["text"])
    # each piece encoded alone gives the same ids as in the batched call
    flat, lengths = counting.inner.tokenize_batch(counting.texts)
    alone = [counting.inner.tokenize_batch([t])[0] for t in counting.texts]
    np.testing.assert_array_equal(np.concatenate(alone), flat)
    assert [a.size for a in alone] == lengths.tolist()


def test_padding_follows_the_schema_convention(data):
    # windows starting with EOD come out one token short (Megatron drops an EOD that ends an empty
    # segment): jaxblend's convention makes the rest batch padding, Megatron's the FIM pad token
    from jaxblend.sources import schema

    fim = FIMOptions(rate=0.0)
    own, compat = _open(data, fim), _open(data, fim, megatron_compat=True)
    eod, pad = own.transform.tokens.eod, own.transform.tokens.pad
    text, n_valid = _open(data).windows(np.arange(len(own)))
    ids = np.flatnonzero(text[:, 1] != eod)[:8]  # no second EOD: exactly one token dropped
    text, n_valid = text[ids], n_valid[ids]
    text[:, 0] = eod

    def raw():
        return schema.raw_windows(text.copy(), n_valid.copy(), np.zeros(ids.size, np.int32), ids)

    a = own.assemble_batch(own.transform.apply(raw(), "train", False))
    b = compat.assemble_batch(compat.transform.apply(raw(), "train", True))
    for r in range(ids.size):
        n = n_valid[r] - 1  # valid tokens left: the last is a target only
        assert n == SEQ
        np.testing.assert_array_equal(a["inputs"][r], text[r, 1 : n + 1])
        np.testing.assert_array_equal(a["targets"][r, : n - 1], text[r, 2 : n + 1])
        assert a["targets"][r, n - 1] == 0 and a["loss_mask"][r, n - 1] == 0
        assert (a["loss_mask"][r, : n - 1] == 1).all()
        np.testing.assert_array_equal(b["inputs"][r], text[r, 1 : n + 1])
        assert b["targets"][r, n - 1] == pad and b["loss_mask"][r, n - 1] == 1  # as Megatron


def test_result_depends_only_on_the_sample(data):
    src = _open(data, FIMOptions(rate=0.8, spm_rate=0.5))
    ids = np.arange(len(src))
    whole = src.get_batch(ids)
    shuffled = np.random.default_rng(0).permutation(ids)
    again = src.get_batch(shuffled)
    for key in ("inputs", "targets", "loss_mask"):
        np.testing.assert_array_equal(again[key], whole[key][shuffled])
    one = src[17]
    np.testing.assert_array_equal(one["inputs"], whole["inputs"][17])
    # a Grain worker's copy: pickled without its tokenizer, which it loads again
    blob = pickle.dumps(src)
    clone = pickle.loads(blob)
    assert clone.transform._tokenizer is None
    np.testing.assert_array_equal(clone.get_batch(shuffled[:9])["inputs"], whole["inputs"][shuffled[:9]])
    # a second opening
    np.testing.assert_array_equal(
        _open(data, FIMOptions(rate=0.8, spm_rate=0.5)).get_batch(ids)["inputs"], whole["inputs"])


def test_fingerprint_covers_the_fim_settings(data):
    plain = _open(data)
    fim = FIMOptions(rate=0.8, spm_rate=0.5)
    a = _open(data, fim)
    assert a.fingerprint != plain.fingerprint
    assert _open(data, fim).fingerprint == a.fingerprint
    for change in ({"rate": 0.7}, {"spm_rate": 0.1}, {"no_prefix": "def"}):
        assert _open(data, dataclasses.replace(fim, **change)).fingerprint != a.fingerprint
    # without FIM the field is left out: plain fingerprints are the ones they were before FIM
    from jaxblend import identity

    assert GPTSchemaOptions().identity_fields(SEQ, True)["fim"] is identity.OMIT


def test_rate_zero_keeps_windows_but_megatrons_eod_rule(data):
    # with rate 0 nothing is rewritten; Megatron's segmenting still drops an EOD that starts a
    # window (an empty segment), shifting that row by one and padding it
    plain, src = _open(data, megatron_compat=True), _open(
        data, FIMOptions(rate=0.0), megatron_compat=True)
    ids = np.arange(len(src))
    text, n_valid = plain.windows(ids)
    got = src.read_batch(ids)["text"]
    eod = src.transform.tokens.eod
    for r in range(ids.size):
        window = text[r, : n_valid[r]]
        if window[0] == eod:
            np.testing.assert_array_equal(got[r, : n_valid[r]], [*window[1:], src.transform.tokens.pad])
        else:
            np.testing.assert_array_equal(got[r, : n_valid[r]], window)


def test_inter_document_masking(data):
    fim = FIMOptions(rate=0.8, spm_rate=0.5)
    ids = np.arange(24)
    compat = _open(data, fim, megatron_compat=True, inter_document_masking=True).get_batch(ids)
    # Megatron's FIM sample is one document
    assert (compat["cu_seqlens"][:, 1:] == SEQ).all() and (compat["max_seqlen"] == SEQ).all()
    own_src = _open(data, fim, inter_document_masking=True, eod_id=0)
    own = own_src.get_batch(ids)
    raw = own_src.read_batch(ids)
    eod = own_src.transform.tokens.eod
    for r in range(ids.size):  # documents end at the EOD tokens of the rewritten window
        ends = np.flatnonzero(raw["text"][r, :SEQ] == eod) + 1
        bounds = own["cu_seqlens"][r]
        inner = bounds[(bounds > 0) & (bounds < SEQ)]
        np.testing.assert_array_equal(inner, ends[ends < SEQ])


def test_blend_and_validation_split(data):
    fim = FIMOptions(rate=0.5, spm_rate=0.5)
    blend = ["1", data["prefix"], "1", data["other"]]
    train = _open(data, fim, blend=blend)
    valid = _open(data, fim, blend=blend, split="valid")
    assert set(train.get_batch(np.arange(len(train)))["dataset_ids"].tolist()) == {0, 1}
    # each split draws from its own streams
    assert valid.split == "valid"
    assert not np.array_equal(
        sample_draws(5, "train", 0).rng.random(4), sample_draws(5, "valid", 0).rng.random(4))


def test_missing_sentinel_and_missing_tokenizer_are_one_line(data, tmp_path):
    with pytest.raises(ValueError, match=r"--fim_middle_token=<mid> is not a token of the tokenizer"):
        _open(data, FIMOptions(middle_token="<mid>"))
    bare = str(tmp_path / "bare_text_document")  # the same tokens without a record (Megatron-made)
    for ext in ("bin", "idx"):
        shutil.copy(f"{data['prefix']}.{ext}", f"{bare}.{ext}")
    with pytest.raises(ValueError, match=f"--fim_data: {bare} has no preprocessing record.*--tokenizer_type"):
        _open(data, FIMOptions(), blend=[bare])
    spec = tok_spec.TokenizerSpec(type="hf", model=data["model"])
    named = _open(data, FIMOptions(rate=0.8, tokenizer=spec), blend=[bare])
    # a record whose tokenizer file is gone: one line naming the file and this flag
    moved = tmp_path / "moved"
    shutil.copytree(os.path.dirname(data["model"]), moved)
    os.rename(data["model"], data["model"] + ".away")
    try:
        with pytest.raises(ValueError, match=r"^--fim_data: tokenizer file .*tokenizer.json recorded in"):
            _open(data, FIMOptions(rate=0.8))
        copy = tok_spec.TokenizerSpec(type="hf", model=str(moved / "tokenizer.json"))
        assert _open(data, FIMOptions(rate=0.8, tokenizer=copy)).transform.spec == copy
    finally:
        os.rename(data["model"] + ".away", data["model"])
    recorded = _open(data, FIMOptions(rate=0.8))
    np.testing.assert_array_equal(named.get_batch(np.arange(8))["inputs"],
                                  recorded.get_batch(np.arange(8))["inputs"])


def test_mock_source_refuses_fim():
    from jaxblend.sources import MockSource

    with pytest.raises(ValueError, match="drop --fim_data or --mock_data"):
        MockSource(8, GPTSchemaOptions(fim=FIMOptions()), seq_length=8)


def test_a_grain_worker_loads_the_tokenizer_and_reads_the_same_batches(data):
    import jax
    from jax.sharding import Mesh

    from jaxblend.loading import PrefetchOptions, make_loader

    src = _open(data, FIMOptions(rate=0.8, spm_rate=0.5))
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(8), ("data",))

    def batches(**kw):
        loader = make_loader(src, mesh, global_batch_size=8, num_steps=5, start_step=2, **kw)
        try:
            return [{k: np.asarray(v) for k, v in next(loader).items()} for _ in range(3)]
        finally:
            loader.close()

    ref = batches()
    got = batches(prefetch=PrefetchOptions(worker_count=1))
    for x, y in zip(got, ref, strict=True):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    np.testing.assert_array_equal(ref[0]["inputs"], src.get_batch(np.arange(16, 24))["inputs"])

"""BERTSource / T5Source: determinism, structure, masking statistics, T5 round trip, loader."""

from __future__ import annotations

import dataclasses
import pickle

import jax
import numpy as np
import pytest
from jax.sharding import Mesh
from masked_testdata import BOS, CLS, EOS, MASK, SENTINELS, SEP, tokenizer_info, write_documents

from jaxblend import IndexedDataset, opening
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.index import MaskedIndexConfig, build_masked_index
from jaxblend.loading import make_loader
from jaxblend.sources import (
    BERTMaskedConfig,
    BERTSource,
    MaskedTokenizerInfo,
    T5MaskedConfig,
    T5Source,
)

N = 400  # samples inspected per statistic


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("masked") / "docs")
    docs = write_documents(prefix, 500, seed=3)
    return prefix, docs


@pytest.fixture(scope="module")
def info():
    return tokenizer_info()


def bert(prefix, info, **kw):
    kw.setdefault("sequence_length", 64)
    return BERTSource(prefix, BERTMaskedConfig(random_seed=11, split="90,10,0", **kw), info)


def t5(prefix, info, maps=None, **kw):
    """A T5 source; `maps`: the map store's location (None: in memory)."""
    kw.setdefault("sequence_length", 64)
    kw.setdefault("sequence_length_decoder", 32)
    access = DataAccess(maps=MapStoreOptions(location=maps))
    return T5Source(prefix, T5MaskedConfig(random_seed=11, split="90,10,0", **kw), info, access=access)


def sample_text(source, i):
    begin, end, target = source.sample_index[i]
    ds = source.dataset
    return np.concatenate([ds.get(j) for j in range(begin, end)]).astype(np.int64), int(target)


def find(sub, arr):
    """Start of `sub` as a contiguous window of `arr`, or -1."""
    if sub.size == 0:
        return 0
    if sub.size > arr.size:
        return -1
    hits = np.flatnonzero(
        (np.lib.stride_tricks.sliding_window_view(arr, sub.size) == sub).all(axis=1)
    )
    return int(hits[0]) if hits.size else -1


def words_of(tokens, cont):
    """Word id per position (continuation pieces join the previous position's word)."""
    starts = ~cont[tokens]
    starts[:1] = True
    return np.cumsum(starts) - 1


class TestDeterminism:
    def test_same_samples_from_fresh_sources_and_any_order(self, data, info):
        a, b = bert(data[0], info), bert(data[0], info)
        ids = np.array([7, 3, 150, 3, 42])
        x = a.get_batch(ids)
        y = b.get_batch(ids[::-1])
        for key in x:
            np.testing.assert_array_equal(x[key], y[key][::-1], err_msg=key)
            np.testing.assert_array_equal(x[key][1], a[3][key], err_msg=key)

    def test_pickle_and_fingerprint(self, data, info):
        a = t5(data[0], info)
        b = pickle.loads(pickle.dumps(a))
        assert b.fingerprint == a.fingerprint and repr(b) == repr(a)
        for key, value in a.get_batch(np.arange(8)).items():
            np.testing.assert_array_equal(value, b.get_batch(np.arange(8))[key])
        assert (
            bert(data[0], info).fingerprint != bert(data[0], info, masking_max_ngram=2).fingerprint
        )
        other = BERTSource(
            data[0], BERTMaskedConfig(random_seed=12, split="90,10,0", sequence_length=64), info
        )
        assert not np.array_equal(other[0]["tokens"], bert(data[0], info)[0]["tokens"])

    def test_splits_cover_disjoint_documents(self, data, info):
        train = bert(data[0], info)
        valid = BERTSource(
            data[0],
            BERTMaskedConfig(random_seed=11, split="90,10,0", sequence_length=64),
            info,
            "valid",
        )
        ds = IndexedDataset(data[0])
        border = int(ds.document_indices[450])
        assert train.sample_index[:, 1].max() <= border
        assert valid.sample_index[:, 0].min() >= border
        with pytest.raises(ValueError, match="test.*empty"):
            BERTSource(
                data[0],
                BERTMaskedConfig(random_seed=11, split="90,10,0", sequence_length=64),
                info,
                "test",
            )


@pytest.fixture(scope="module")
def batch(data, info):
    source = bert(data[0], info)
    return source, source.get_batch(np.arange(N))


class TestBERT:
    def test_layout_segments_and_sentence_order(self, batch):
        source, b = batch
        assert b["tokens"].shape == (N, 64) and b["sop_label"].shape == (N,)
        for r in range(N):
            real = int(b["padding_mask"][r].sum())
            assert b["padding_mask"][r, :real].all() and not b["padding_mask"][r, real:].any()
            original = np.where(b["loss_mask"][r] > 0, b["labels"][r], b["tokens"][r])[:real]
            seps = np.flatnonzero(original == SEP)
            assert original[0] == CLS and seps.size == 2 and seps[-1] == real - 1
            np.testing.assert_array_equal(
                b["types"][r, :real], (np.arange(real) > seps[0]).astype(np.int32)
            )
            seg_a, seg_b = original[1 : seps[0]], original[seps[0] + 1 : seps[1]]
            text, target = sample_text(source, r)
            assert seg_a.size + seg_b.size <= target and seg_a.size and seg_b.size
            pa, pb = find(seg_a, text), find(seg_b, text)
            assert pa >= 0 and pb >= 0
            # sentence-order label: 1 iff segment A comes after segment B in the document
            assert (pa > pb) == bool(b["sop_label"][r])
        assert abs(b["sop_label"].mean() - 0.5) < 4 * np.sqrt(0.25 / N)

    def test_mask_rate_budget_and_labels(self, batch):
        source, b = batch
        np.testing.assert_array_equal(b["labels"] == -1, b["loss_mask"] == 0)
        real = b["padding_mask"].sum(axis=1)
        masked = b["loss_mask"].sum(axis=1)
        targets = source.sample_index[:N, 2]
        budget = np.minimum(0.15 * targets, np.maximum(1, np.round(real * 0.15)))
        assert (masked <= budget).all()  # may be 0 when no word fits a tiny budget (as Megatron)
        assert (masked >= 1).mean() > 0.95
        rate = masked.sum() / (real - 3).sum()
        assert 0.13 < rate < 0.16
        assert not b["loss_mask"][:, 0].any()  # [CLS] is never masked
        assert not b["loss_mask"][b["tokens"] == SEP].any()

    def test_80_10_10_replacement(self, batch):
        _, b = batch
        sel = b["loss_mask"] > 0
        tokens, labels = b["tokens"][sel], b["labels"][sel]
        n = tokens.size
        is_mask = (tokens == MASK).mean()
        same = (tokens == labels).mean()
        tol = 4 * np.sqrt(0.16 / n)
        assert abs(is_mask - 0.8) < tol
        assert abs(same - 0.1) < 4 * np.sqrt(0.09 / n) + 0.001  # random ids rarely equal the label
        assert abs((1 - is_mask - same) - 0.1) < 4 * np.sqrt(0.09 / n)

    def test_whole_words_masked_together(self, batch, info):
        _, b = batch
        cont = info.is_continuation
        for r in range(N):
            real = int(b["padding_mask"][r].sum())
            original = np.where(b["loss_mask"][r] > 0, b["labels"][r], b["tokens"][r])[:real]
            # a "##" piece after [SEP] joins the word before it
            text = (original != CLS) & (original != SEP)
            masked = b["loss_mask"][r, :real][text] > 0
            words = words_of(original[text], cont)
            per_word = np.bincount(words, weights=masked, minlength=words.max() + 1)
            size = np.bincount(words, minlength=words.max() + 1)
            assert np.all((per_word == 0) | (per_word == size)), r

    def test_piece_masking_splits_words(self, data, info):
        b = bert(data[0], info, masking_do_full_word=False).get_batch(np.arange(100))
        cont = info.is_continuation
        lone = 0
        for r in range(100):
            original = np.where(b["loss_mask"][r] > 0, b["labels"][r], b["tokens"][r])
            m = b["loss_mask"][r] > 0
            lone += int(np.sum(m[1:] & ~m[:-1] & cont[original[1:]]))
        assert lone > 0

    @staticmethod
    def mean_run(b):
        m = b["loss_mask"] > 0
        starts = m & ~np.pad(m, ((0, 0), (1, 0)))[:, :-1]
        return m.sum() / starts.sum()

    def test_ngram_options_change_span_lengths(self, data, info):
        kw = {"masking_do_full_word": False, "sequence_length": 128}
        ids = np.arange(200)
        default = self.mean_run(bert(data[0], info, **kw).get_batch(ids))
        longer = self.mean_run(
            bert(data[0], info, masking_use_longer_ngrams=True, **kw).get_batch(ids)
        )
        geometric = self.mean_run(
            bert(
                data[0], info, masking_use_geometric_distribution=True, masking_max_ngram=10, **kw
            ).get_batch(ids)
        )
        unigram = self.mean_run(bert(data[0], info, masking_max_ngram=1, **kw).get_batch(ids))
        assert unigram < default < longer
        assert geometric > default

    def test_permutation_adds_predictions_of_shuffled_tokens(self, data, info):
        ids = np.arange(200)
        plain = bert(data[0], info).get_batch(ids)
        perm = bert(data[0], info, masking_do_permutation=True).get_batch(ids)
        assert perm["loss_mask"].sum() > 1.5 * plain["loss_mask"].sum()
        real = perm["padding_mask"].sum(axis=1)
        for r in range(200):
            sel = perm["loss_mask"][r] > 0
            # without the [MASK]/random replacements, predictions are a permutation of their labels
            keep = sel & (perm["tokens"][r] != MASK)
            assert keep.sum() <= sel.sum() <= 2 * np.round(0.15 * real[r]) + 1

    def test_short_sequences(self, data, info):
        source = bert(data[0], info, short_sequence_probability=0.5, sequence_length=128)
        targets = source.sample_index[:, 2]
        short = (targets < 125).mean()
        assert abs(short - 0.5) < 0.1
        assert targets.min() >= 2 and targets.max() == 125


def test_num_samples_adds_passes_with_fresh_targets(data, info):
    one = bert(data[0], info, short_sequence_probability=0.5)
    more = bert(data[0], info, short_sequence_probability=0.5, num_samples=2 * len(one) + 1)
    assert len(more) >= 2 * len(one) + 1
    rows = {tuple(r) for r in more.sample_index.tolist()}
    assert len(rows) > len(one)  # later passes draw other target lengths, hence other packings


class TestT5:
    def test_round_trip_and_structure(self, data, info):
        source = t5(data[0], info)
        b = source.get_batch(np.arange(N))
        sentinels = np.asarray(SENTINELS)
        for r in range(N):
            text, target = sample_text(source, r)
            text = text[:target]
            e = int(b["encoder_padding_mask"][r].sum())
            d = int(b["decoder_padding_mask"][r].sum())
            enc = b["encoder_tokens"][r, :e]
            dec = b["decoder_tokens"][r, :d]
            lab = b["labels"][r, :d]
            assert dec[0] == BOS and lab[-1] == EOS
            np.testing.assert_array_equal(dec[1:], lab[:-1])
            assert (b["labels"][r, d:] == -1).all() and (
                b["loss_mask"][r] == b["decoder_padding_mask"][r]
            ).all()
            # sentinels appear in order in both
            enc_s = enc[np.isin(enc, sentinels)]
            lab_s = lab[np.isin(lab, sentinels)]
            np.testing.assert_array_equal(enc_s, sentinels[: enc_s.size])
            np.testing.assert_array_equal(lab_s, enc_s)
            # reconstruct the original text from encoder + decoder targets
            spans = np.split(lab[:-1], np.flatnonzero(np.isin(lab[:-1], sentinels)))[1:]
            rebuilt = []
            for t in enc.tolist():
                if t in SENTINELS:
                    rebuilt.extend(spans[SENTINELS.index(t)][1:].tolist())
                else:
                    rebuilt.append(t)
            np.testing.assert_array_equal(rebuilt, text)
            assert d <= 32 and e <= 64
        masked = (
            b["loss_mask"].sum(axis=1) - 1 - np.isin(b["labels"], sentinels).sum(axis=1)
        ).sum()
        total = sum(
            min(sample_text(source, r)[0].size, sample_text(source, r)[1]) for r in range(N)
        )
        assert 0.12 < masked / total < 0.16

    def test_decoder_limit_is_respected(self, data, info):
        b = t5(data[0], info, sequence_length=128, sequence_length_decoder=12).get_batch(
            np.arange(100)
        )
        assert b["decoder_padding_mask"].sum(axis=1).max() <= 12


class TestValidation:
    @pytest.mark.parametrize(
        "kw, match",
        [
            ({"masking_probability": 0.0}, "masking_probability"),
            ({"masking_probability": 1.0}, "masking_probability"),
            ({"short_sequence_probability": 1.5}, "short_sequence_probability"),
            ({"masking_max_ngram": 0}, "masking_max_ngram"),
            ({"sequence_length": 2}, "sequence_length"),
            ({"split": "a"}, "split"),
            (
                {"masking_use_geometric_distribution": True, "masking_do_permutation": True},
                "cannot",
            ),
        ],
    )
    def test_bad_config(self, kw, match):
        with pytest.raises(ValueError, match=match):
            BERTMaskedConfig(random_seed=1, **{"sequence_length": 64, **kw})

    def test_bad_tokenizer_info(self, data):
        with pytest.raises(ValueError, match="mask"):
            MaskedTokenizerInfo(vocab_size=10, cls=1, sep=2, mask=10, pad=0)
        with pytest.raises(ValueError, match="is_continuation"):
            MaskedTokenizerInfo(
                vocab_size=10, cls=1, sep=2, mask=3, pad=0, is_continuation=np.zeros(4, bool)
            )
        few = MaskedTokenizerInfo(
            vocab_size=2000, cls=1, sep=2, mask=3, pad=0, bos=4, eos=5, sentinel_ids=(1999,)
        )
        with pytest.raises(ValueError, match="sentinel"):
            T5Source(data[0], T5MaskedConfig(random_seed=1, sequence_length=64), few)
        with pytest.raises(TypeError, match="BERTMaskedConfig"):
            BERTSource(data[0], T5MaskedConfig(random_seed=1, sequence_length=64), few)

    def test_out_of_range_id(self, data, info):
        source = bert(data[0], info)
        with pytest.raises(IndexError):
            source.get_batch(np.array([len(source)]))


def test_masked_batches_through_make_loader(data, info):
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "tensor"))
    for source in (bert(data[0], info), t5(data[0], info)):
        loader = make_loader(source, mesh, global_batch_size=16, num_steps=3)
        for k, batch in enumerate(loader):
            expected = source.get_batch(np.arange(16 * k, 16 * (k + 1)))
            assert batch.keys() == expected.keys()
            for key, value in expected.items():
                np.testing.assert_array_equal(np.asarray(batch[key]), value, err_msg=key)
        assert loader.state()["step"] == 3


class TestSampleIndexFromTheIndexLayer:
    def test_configs_derive_the_index_config(self):
        bert_cfg = BERTMaskedConfig(random_seed=5, sequence_length=64, num_samples=9)
        assert bert_cfg.index_config() == MaskedIndexConfig(
            split="969,30,1", seed=5, max_length=61, short_sequence_probability=0.1,
            min_sentences=2, num_samples=9,
        )
        no_sop = BERTMaskedConfig(random_seed=5, sequence_length=64, classification_head=False)
        assert no_sop.index_config().min_sentences == 1
        t5_cfg = T5MaskedConfig(random_seed=5, sequence_length=64)
        assert t5_cfg.index_config().max_length == 62

    def test_source_reads_the_index_layer_rows(self, data, info):
        source = bert(data[0], info)
        built = build_masked_index(
            source.config.index_config(), opening.dataset_info(source.dataset, data[0]), "train"
        )
        np.testing.assert_array_equal(source.sample_index, built.rows)
        assert source.index.fingerprint == built.fingerprint

    @pytest.mark.parametrize(
        "change",
        [
            {"short_sequence_probability": 0.3},
            {"num_samples": 5000},
            {"random_seed": 12},
            {"split": "80,20,0"},
            {"sequence_length": 80},
            {"classification_head": False},
        ],
    )
    def test_fingerprint_changes_with_the_index_config(self, data, info, change):
        fields = {"random_seed": 11, "split": "90,10,0", "sequence_length": 64}
        a = bert(data[0], info)
        b = BERTSource(data[0], BERTMaskedConfig(**{**fields, **change}), info)
        assert a.index.fingerprint != b.index.fingerprint
        assert a.fingerprint != b.fingerprint

    def test_cached_index_serves_the_same_samples(self, data, info, tmp_path):
        plain = t5(data[0], info)
        first = t5(data[0], info, maps=str(tmp_path / "a"))
        second = t5(data[0], info, maps=str(tmp_path / "a"))
        elsewhere = t5(data[0], info, maps=str(tmp_path / "b"))
        assert first.index.cache_path == second.index.cache_path is not None
        assert isinstance(second.sample_index, np.memmap)
        # the cache location is not part of the stream's identity (a resume state stays valid)
        assert len({s.fingerprint for s in (plain, first, second, elsewhere)}) == 1
        ids = np.array([0, 5, 17, len(plain) - 1])
        for key, value in plain.get_batch(ids).items():
            np.testing.assert_array_equal(second.get_batch(ids)[key], value, err_msg=key)
        restored = pickle.loads(pickle.dumps(second))  # as Grain workers receive it
        assert isinstance(restored.sample_index, np.memmap)  # reloaded, not copied
        np.testing.assert_array_equal(restored.sample_index, plain.sample_index)
        assert restored.fingerprint == second.fingerprint
        copied = pickle.loads(pickle.dumps(plain))  # no cache: the rows travel in the pickle
        np.testing.assert_array_equal(copied.sample_index, plain.sample_index)


class TestFingerprint:
    def test_a_new_defaulted_data_neutral_option_keeps_it(self, data, info):
        @dataclasses.dataclass(frozen=True)
        class WithNeutralOption(BERTMaskedConfig):
            read_hint: int = 4  # an option added later that leaves every sample unchanged

        fields = {"random_seed": 11, "split": "90,10,0", "sequence_length": 64}
        extended = BERTSource(data[0], WithNeutralOption(**fields, read_hint=9), info)
        assert extended.fingerprint == bert(data[0], info).fingerprint

    @pytest.mark.parametrize(
        "change", [{"masking_probability": 0.2}, {"masking_do_full_word": False},
                   {"short_sequence_probability": 0.3}],
    )
    def test_a_masking_option_changes_it(self, data, info, change):
        assert bert(data[0], info, **change).fingerprint != bert(data[0], info).fingerprint

    def test_the_tokenizer_ids_change_it(self, data, info):
        other = dataclasses.replace(info, mask=info.mask + 1)
        assert bert(data[0], other).fingerprint != bert(data[0], info).fingerprint
        t5_a = t5(data[0], info)
        assert t5(data[0], info, sequence_length_decoder=24).fingerprint != t5_a.fingerprint

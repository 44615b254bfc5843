"""GPTSource (`BlendedSource` is the same class): windows, schema, pickling, and parity with
Megatron-Core samples."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from helpers_data import write_random_dataset

from jaxblend import IndexedDataset, index
from jaxblend.access import DataAccess, MapStoreOptions
from jaxblend.sources import BlendedSource, GPTSchemaOptions, GPTSource, open_gpt_sources
from jaxblend.sources.schema import windows_to_batch

EOD = 0


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt_source")
    rng = np.random.default_rng(1)
    return [
        write_random_dataset(str(root / n), rng, d, lengths=(1, 59), vocab=(1, 500), eod=EOD)
        for n, d in (("a", 80), ("b", 120))
    ]


def config(blend, seq=16, extra=True, samples=(96, 16, 16), **kw):
    return index.GPTDataConfig(
        blend=blend, split="90,5,5", seq_length=seq, seed=5, num_samples=samples,
        add_extra_token_to_sequence=extra, **kw,
    )


def reference_window(plan, i, datasets, window):
    """Token window of sample i from `pieces` and plain `IndexedDataset.get` calls."""
    parts = [datasets[p.dataset_id].get(p.sequence_id, p.start, p.stop - p.start) for p in plan.pieces(i)]
    tokens = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    return np.pad(tokens, (0, window - tokens.size), constant_values=-1)


@pytest.mark.parametrize("extra", [True, False])
def test_windows_equal_piece_by_piece_reads(prefixes, extra):
    sources = open_gpt_sources(config(["40", prefixes[0], "60", prefixes[1]], extra=extra),
                               GPTSchemaOptions())
    src = sources["train"]
    assert isinstance(src, BlendedSource)
    datasets = [IndexedDataset(p) for p in src.dataset_names]
    ids = np.random.default_rng(0).permutation(len(src))[:40]
    text, n_valid = src.windows(ids)
    for row, i in enumerate(ids):
        ref = reference_window(src.span_index.maps, int(i), datasets, 16 + extra)
        np.testing.assert_array_equal(text[row], ref)
        assert n_valid[row] == np.count_nonzero(ref >= 0)


def test_single_prefix_is_a_gpt_source_and_schema(prefixes):
    opts = GPTSchemaOptions(eod_id=EOD, eod_mask_loss=True,
                            reset_position_ids=True, reset_attention_mask=True)
    src = open_gpt_sources(config([prefixes[1]], samples=(50, None, None)), opts)["train"]
    assert isinstance(src, GPTSource)
    batch = src.get_batch(np.arange(8))
    text, _ = src.windows(np.arange(8))
    np.testing.assert_array_equal(batch["inputs"], text[:, :-1])
    np.testing.assert_array_equal(batch["targets"], text[:, 1:])
    np.testing.assert_array_equal(batch["loss_mask"], (text[:, 1:] != EOD).astype(np.float32))
    for r in range(8):
        eods = np.flatnonzero(text[r, :-1] == EOD)
        expected_seg = 1 + np.searchsorted(eods, np.arange(16), side="left")
        np.testing.assert_array_equal(batch["segment_ids"][r], expected_seg)
        start = np.concatenate([[0], eods + 1])[expected_seg - 1]
        np.testing.assert_array_equal(batch["positions"][r], np.arange(16) - start)
    assert batch["dataset_ids"].dtype == np.int32 and not batch["dataset_ids"].any()
    item = src[3]
    np.testing.assert_array_equal(item["inputs"], batch["inputs"][3])
    assert item["sample_ids"] == 3


def test_pickled_source_reopens_and_matches(prefixes, tmp_path):
    access = DataAccess(maps=MapStoreOptions(location=str(tmp_path)))
    src = open_gpt_sources(
        config(["1", prefixes[0], "1", prefixes[1]]), GPTSchemaOptions(), access=access
    )["train"]
    blob = pickle.dumps(src)
    assert len(blob) < 4096, "index maps must not travel with the pickled source"
    clone = pickle.loads(blob)
    # the worker reaches the data as the parent did
    assert clone.access == access and clone.span_index._reopen.access == access
    assert repr(clone) == repr(src) and clone.fingerprint == src.fingerprint
    ids = np.arange(len(src))
    for key, value in src.get_batch(ids).items():
        np.testing.assert_array_equal(clone.get_batch(ids)[key], value)


def test_worker_refuses_a_plan_with_another_fingerprint(tmp_path):
    # A Grain worker rebuilds the maps from the files: if a dataset changed since the parent opened
    # it, the rebuilt plan's fingerprint differs and the worker refuses to serve it.
    prefix = write_random_dataset(str(tmp_path / "d"), np.random.default_rng(7), 60, lengths=(1, 40))
    src = open_gpt_sources(config([prefix], samples=(40, None, None)), GPTSchemaOptions())["train"]
    blob = pickle.dumps(src)
    assert pickle.loads(blob).get_batch(np.arange(4))  # same files: accepted
    write_random_dataset(prefix, np.random.default_rng(8), 60, lengths=(1, 40))
    with pytest.raises(ValueError, match="rebuilt in this worker has fingerprint"):
        pickle.loads(blob).get_batch(np.arange(4))


def test_padding_of_a_kept_partial_validation_sample(prefixes):
    opts = GPTSchemaOptions()
    src = open_gpt_sources(
        config([prefixes[0]], samples=(20, None, None), drop_last_partial_validation_sequence=False),
        opts,
    )["valid"]
    last = len(src) - 1
    _, n_valid = src.windows(np.array([last]))
    batch = src.get_batch(np.array([last]))
    if n_valid[0] < 17:
        pad = np.arange(16) + 1 >= n_valid[0]
        assert not batch["loss_mask"][0][pad].any()
        assert not batch["targets"][0][pad].any()
        assert (batch["segment_ids"][0][np.arange(16) >= n_valid[0]] == 0).all()


def test_the_window_is_the_data_configurations(prefixes):
    # seq_length and the extra token are given once, in the data configuration: the source reads
    # them there, and a batch of windows of another width is refused.
    for seq, extra in ((16, True), (16, False), (12, True)):
        src = open_gpt_sources(
            config([prefixes[0]], seq=seq, extra=extra, samples=(20, None, None)), GPTSchemaOptions()
        )["train"]
        assert (src.seq_length, src.window_length) == (seq, seq + extra)
        assert src.windows(np.arange(2))[0].shape == (2, seq + extra)
        assert src.get_batch(np.arange(2))["inputs"].shape == (2, seq)
    with pytest.raises(ValueError, match="seq_length=16"):
        windows_to_batch(np.zeros((1, 18), np.int32), np.array([18]), GPTSchemaOptions(), seq_length=16)


def test_errors(prefixes):
    src = open_gpt_sources(config([prefixes[0]], samples=(20, None, None)), GPTSchemaOptions())["train"]
    with pytest.raises(IndexError, match="out of range"):
        src.get_batch(np.array([len(src)]))
    with pytest.raises(ValueError, match="eod_id is required"):
        GPTSchemaOptions(eod_mask_loss=True)


@pytest.mark.parity
def test_blend_samples_equal_megatron(prefixes, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    class Tok:
        eod = EOD
        pad = 65000
        unique_identifiers = {"class": "Tok"}  # noqa: RUF012 - megatron reads a dict
        vocab_size = 1000

    blend = ["30", prefixes[0], "70", prefixes[1]]
    mcfg = GPTDatasetConfig(
        random_seed=5, sequence_length=16, blend=([prefixes[0], prefixes[1]], [30.0, 70.0]),
        split="90,5,5", path_to_cache=None, tokenizer=Tok(), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False, create_attention_mask=False,
        mid_level_dataset_surplus=0.005,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [96, 16, 16], lambda: True, mcfg).build()
    src = open_gpt_sources(config(blend), GPTSchemaOptions())["train"]
    assert len(src) == len(train)
    batch = src.get_batch(np.arange(len(src)))
    for i in range(len(src)):
        sample = train[i]
        np.testing.assert_array_equal(batch["inputs"][i], sample["tokens"].numpy())
        np.testing.assert_array_equal(batch["targets"][i], sample["labels"].numpy())
        assert torch.equal(torch.as_tensor(batch["positions"][i]), sample["position_ids"])


class TestFingerprint:
    def fingerprint(self, prefixes, options, **kw):
        blend = ["40", prefixes[0], "60", prefixes[1]]
        return open_gpt_sources(config(blend, **kw), options)["train"].fingerprint

    def test_a_new_defaulted_data_neutral_option_keeps_it(self, prefixes):
        @dataclasses.dataclass(frozen=True)
        class WithNeutralOption(GPTSchemaOptions):
            read_hint: int = 4  # an option added later that leaves every batch unchanged

        base = GPTSchemaOptions(eod_id=EOD)
        extended = WithNeutralOption(eod_id=EOD, read_hint=2)
        assert self.fingerprint(prefixes, extended) == self.fingerprint(prefixes, base)

    @pytest.mark.parametrize(
        "options, kw",
        [(GPTSchemaOptions(eod_id=EOD + 1), {}),
         (GPTSchemaOptions(eod_id=EOD, reset_position_ids=True), {}),
         (GPTSchemaOptions(eod_id=EOD), {"seq": 17})],
    )
    def test_a_data_changing_option_changes_it(self, prefixes, options, kw):
        base = self.fingerprint(prefixes, GPTSchemaOptions(eod_id=EOD))
        assert self.fingerprint(prefixes, options, **kw) != base

    def test_the_seed_changes_it(self, prefixes):
        options = GPTSchemaOptions(eod_id=EOD)
        blend = ["40", prefixes[0], "60", prefixes[1]]
        other = index.GPTDataConfig(blend=blend, split="90,5,5", seq_length=16, seed=6,
                                    num_samples=(96, 16, 16))
        assert open_gpt_sources(other, options)["train"].fingerprint != self.fingerprint(prefixes, options)

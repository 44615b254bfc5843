"""Staged blends (`jaxblend.index.blend_schedule`): validation, per-stage counts, no repeats across
stages, epochs, future and past edits, and the one-stage == plain blend equivalence (pure, in
memory; Megatron parity is in test_parity_megatron_staged.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers_data import random_infos

from jaxblend import index
from jaxblend.index import blend_index, blend_schedule, data_maps, gpt, maps_key, staged_split
from jaxblend.index import split as split_lib
from jaxblend.index.estimate import estimate_plan

S = 16


@pytest.fixture(scope="module")
def infos():
    # /d/a and /d/b hold several hundred samples of S = 16 tokens; /d/c about 20 (it wraps).
    return random_infos(
        11, {"/d/a": (60, 400), "/d/b": (90, 200), "/d/c": (10, 60), "/d/d": (40, 300)}
    )


def _schedule(*stages) -> index.BlendSchedule:
    return index.BlendSchedule(tuple(index.BlendStage(s, b) for s, b in stages))


BASE = (
    (0, ("50", "/d/a", "50", "/d/b")),
    (100, ("20", "/d/a", "80", "/d/c")),
    (200, ("30", "/d/b", "70", "/d/a")),
)


def _config(schedule, num_samples=400, **kwargs) -> index.GPTDataConfig:
    base = {
        "blend": None,
        "split": None,
        "seq_length": S,
        "num_samples": num_samples if isinstance(num_samples, tuple) else (num_samples, None, None),
        "train_schedule": schedule,
    }
    base.update(kwargs)
    return index.GPTDataConfig(**base)


def _train(config, infos) -> index.SplitMaps:
    return index.build_data_maps(config, infos).split("train")


def _spans_of(split: index.SplitMaps, stop: int) -> list[np.ndarray]:
    s = split.spans(np.arange(stop, dtype=np.int64), keep_empty=True)
    names = np.array(split.dataset_names)[s.dataset]
    return [s.row, names, s.sequence, s.offset, s.length]


def _assert_same_samples(a: index.SplitMaps, b: index.SplitMaps, stop: int) -> None:
    for x, y in zip(_spans_of(a, stop), _spans_of(b, stop)):
        np.testing.assert_array_equal(x, y)


class TestValidation:
    @pytest.mark.parametrize(
        ("start", "blend", "error", "match"),
        [
            (-1, ("/d/a",), ValueError, r"start_sample = -1 must be in \[0"),
            (True, ("/d/a",), TypeError, "start_sample = True must be an int"),
            ("3", ("/d/a",), TypeError, "start_sample = '3' must be an int"),
            (0, (), ValueError, "names no dataset"),
            (5, ("50", "/d/a", "50"), ValueError, "odd length"),
            (5, ("0", "/d/a", "50", "/d/b"), ValueError, r"stage at sample 5: blend\[0\] = 0.0"),
            (5, ("-1", "/d/a", "2", "/d/b"), ValueError, "is negative"),
            (5, ("1", "/d/a", "2", "/d/a"), ValueError, "names dataset '/d/a' twice"),
            (5, ("/d/a", "/d/b"), ValueError, "several datasets but no weights"),
            (5, None, TypeError, "must be a list of strings"),
        ],
    )
    def test_stage_errors(self, start, blend, error, match):
        with pytest.raises(error, match=match) as info:
            index.BlendStage(start, blend)
        assert "\n" not in str(info.value)

    def test_stage_forms(self):
        assert tuple(index.BlendStage(0, "30 /d/a 70 /d/b").blend) == ("30", "/d/a", "70", "/d/b")
        assert index.BlendStage(np.int64(7), ["/d/a"]).start_sample == 7
        assert index.BlendStage(0, ["/d/a"]).weights() == [1.0]

    @pytest.mark.parametrize(
        ("stages", "error", "match"),
        [
            ((), ValueError, "at least one stage"),
            (((3, ("/d/a",)),), ValueError, r"stages\[0\] starts at sample 3; the first stage must start at 0"),
            (((0, ("/d/a",)), (10, ("/d/b",)), (10, ("/d/a",))), ValueError, r"stages\[2\] starts at sample 10, not after stages\[1\]"),
            (((0, ("/d/a",)), (0, ("/d/b",))), ValueError, "strictly increase"),
        ],
    )
    def test_schedule_errors(self, stages, error, match):
        with pytest.raises(error, match=match) as info:
            _schedule(*stages)
        assert "\n" not in str(info.value)

    def test_schedule_needs_stages(self):
        with pytest.raises(TypeError, match=r"stages\[1\] is a tuple; expected a BlendStage"):
            index.BlendSchedule((index.BlendStage(0, ["/d/a"]), (5, ["/d/b"])))
        with pytest.raises(TypeError, match="must be a sequence of BlendStage"):
            index.BlendSchedule(index.BlendStage(0, ["/d/a"]))

    def test_config_errors(self):
        schedule = _schedule(*BASE)
        with pytest.raises(ValueError, match=r"num_samples\[train\] = None but train_schedule's last stage starts at sample 200"):
            _config(schedule, num_samples=None)
        with pytest.raises(ValueError, match="last stage starts at sample 200"):
            _config(schedule, num_samples=200)
        with pytest.raises(TypeError, match="train_schedule is a dict; expected a BlendSchedule"):
            _config({"stages": []})
        with pytest.raises(ValueError, match="leaves no documents to the train split"):
            _config(schedule, blend=["/d/a"], split="0,50,50")
        with pytest.raises(ValueError, match="one of blend, blend_per_split or train_schedule"):
            index.GPTDataConfig(blend=None, split=None)

    def test_frozen_picklable_and_helpers(self):
        schedule = _schedule(*BASE)
        assert pickle.loads(pickle.dumps(schedule)) == schedule
        config = _config(schedule)
        assert pickle.loads(pickle.dumps(config)) == config
        with pytest.raises(AttributeError):
            schedule.stages = ()
        with pytest.raises(AttributeError):
            schedule.stages[0].start_sample = 4
        assert schedule.prefixes() == ["/d/a", "/d/b", "/d/c"]
        assert [schedule.stage_of(i) for i in (0, 99, 100, 199, 200, 10**9)] == [0, 0, 1, 1, 2, 2]
        assert schedule.bounds(400) == [(0, 100), (100, 200), (200, 400)]
        with pytest.raises(ValueError, match="must run past the last stage's start"):
            schedule.bounds(200)
        assert schedule.truncated(100) == _schedule(BASE[0])
        assert schedule.truncated(101) == _schedule(*BASE[:2])
        assert schedule.truncated(0) is None
        assert index.BlendSchedule.single(["/d/a"]) == _schedule((0, ("/d/a",)))
        assert schedule.to_json()["stages"][1] == {
            "start_sample": 100, "blend": ["20", "/d/a", "80", "/d/c"]
        }

    def test_epoch_seeds(self):
        seeds = [blend_schedule.epoch_seed(1234, e) for e in range(50)]
        assert seeds[0] == 1234
        assert len(set(seeds)) == 50
        assert all(0 <= s < 2**32 for s in seeds)
        assert blend_schedule.epoch_seed(1235, 1) != seeds[1]


class TestStagedSplit:
    def test_per_stage_counts_follow_greedy_blending(self, infos):
        schedule = _schedule(*BASE)
        train = _train(_config(schedule), infos)
        assert len(train) == 400 and train.is_blended and train.is_staged
        assert train.dataset_names == ("/d/a", "/d/b", "/d/c")
        position = {p: j for j, p in enumerate(train.dataset_names)}
        for stage, (start, stop) in zip(schedule.stages, schedule.bounds(400)):
            ids = np.asarray(train.dataset_index[start:stop])
            weights = stage.weights()
            local, _ = blend_index.build_blending_indices(weights, stop - start)
            mapping = np.array([position[p] for p in stage.parsed.prefixes])
            np.testing.assert_array_equal(ids, mapping[local])  # Megatron's greedy choice
            counts = np.bincount(ids, minlength=3)
            for p, w in zip(stage.parsed.prefixes, weights):
                assert abs(counts[position[p]] - w * (stop - start)) <= 1.5
            others = set(range(3)) - set(mapping.tolist())
            assert all(counts[j] == 0 for j in others)

    def test_each_dataset_continues_where_it_left_off(self, infos):
        train = _train(_config(_schedule(*BASE)), infos)
        di = np.asarray(train.dataset_index)
        dsi = np.asarray(train.dataset_sample_index)
        for j in range(train.num_datasets):
            # No sample of a dataset is drawn twice: its counter runs 0, 1, 2, ... across stages.
            np.testing.assert_array_equal(dsi[di == j], np.arange(np.count_nonzero(di == j)))

    def test_joining_and_leaving_datasets(self, infos):
        train = _train(_config(_schedule(*BASE)), infos)
        di = np.asarray(train.dataset_index)
        dsi = np.asarray(train.dataset_sample_index)
        # /d/c (id 2) joins at sample 100 with its first sample; /d/b (id 1) leaves at 100 and
        # comes back at 200 where it left off.
        assert not np.any(di[:100] == 2)
        assert di[100:200].tolist().count(2) > 0
        assert dsi[100:][di[100:] == 2][0] == 0
        assert not np.any(di[100:200] == 1)
        assert dsi[200:][di[200:] == 1][0] == np.count_nonzero(di[:100] == 1)

    def test_exhausted_dataset_wraps_into_fresh_epochs(self, infos):
        config = _config(_schedule(*BASE))
        train = _train(config, infos)
        c = train.dataset_names.index("/d/c")
        drawn = int(np.count_nonzero(np.asarray(train.dataset_index) == c))
        epochs = train.dataset_epochs(c)
        info = infos["/d/c"]
        documents = split_lib.split_indices((0.0, 1.0), info.num_sequences)
        per_epoch = len(gpt.build_gpt_index_maps(info.sequence_lengths, documents, None, S, 1234))
        assert epochs == -(-drawn // per_epoch) > 2  # it wrapped more than once
        assert train.dataset_length(c) == epochs * per_epoch
        orders = set()
        for e in range(epochs):
            maps = train.constituent(c, epoch=e)
            expected = gpt.build_gpt_index_maps(
                info.sequence_lengths, documents, None, S, blend_schedule.epoch_seed(1234, e)
            )
            # Each epoch is a one-epoch map: every document once, every sample once.
            np.testing.assert_array_equal(maps.document_index, expected.document_index)
            np.testing.assert_array_equal(maps.sample_index, expected.sample_index)
            np.testing.assert_array_equal(maps.shuffle_index, expected.shuffle_index)
            np.testing.assert_array_equal(np.sort(maps.document_index), documents)
            np.testing.assert_array_equal(np.sort(maps.shuffle_index), np.arange(per_epoch))
            orders.add(maps.document_index.tobytes())
        assert len(orders) == epochs  # a new epoch is a new shuffle
        with pytest.raises(ValueError, match=f"holds {epochs} epochs laid end to end"):
            train.constituent(c)
        with pytest.raises(IndexError, match="epoch 99 out of range"):
            train.constituent(c, epoch=99)
        # The samples drawn from /d/c in epoch e are epoch e's samples, none twice.
        di = np.asarray(train.dataset_index)
        ids = np.flatnonzero(di == c)
        spans = train.spans(ids, keep_empty=True)
        k = np.asarray(train.dataset_sample_index)[ids]
        for e in range(epochs):
            maps = train.constituent(c, epoch=e)
            rows = [int(maps.shuffle_index[q]) for q in k[k // per_epoch == e] % per_epoch]
            assert len(set(rows)) == len(rows)
            for r in np.flatnonzero(k // per_epoch == e)[:5]:
                q = int(maps.shuffle_index[k[r] % per_epoch])
                first = int(maps.document_index[maps.sample_index[q, 0]])
                assert spans.sequence[spans.row == r][0] == first
                assert spans.offset[spans.row == r][0] == maps.sample_index[q, 1]

    def test_one_stage_equals_the_plain_weighted_blend(self, infos):
        blend = ["30", "/d/a", "50", "/d/b", "20", "/d/d"]
        n = 300
        plain_config = index.GPTDataConfig(
            blend=blend, split="100,0,0", seq_length=S, num_samples=(n, None, None)
        )
        plain = _train(plain_config, infos)
        staged = _train(_config(index.BlendSchedule.single(blend), num_samples=n), infos)
        for j in range(3):  # every dataset within one epoch: Megatron's maps are one epoch
            assert len(plain.constituent(j).document_index) == infos[plain.dataset_names[j]].num_sequences
        assert len(staged) == n <= len(plain)
        np.testing.assert_array_equal(staged.dataset_index, plain.dataset_index[:n])
        np.testing.assert_array_equal(staged.dataset_sample_index, plain.dataset_sample_index[:n])
        _assert_same_samples(staged, plain, n)

    def test_split_portion_and_valid_test(self, infos):
        schedule = _schedule(*BASE)
        config = _config(
            schedule, blend=["/d/a", "/d/b"], split="80,15,5", num_samples=(400, 30, None)
        )
        plan = index.build_data_maps(config, infos)
        train = plan.split("train")
        assert train.is_staged and len(train) == 400
        spans = train.spans(np.arange(400, dtype=np.int64))
        for j, p in enumerate(train.dataset_names):
            end = split_lib.split_range((0.0, 0.8), infos[p].num_sequences)[1]
            assert spans.sequence[spans.dataset == j].max() < end  # train portion only
        plain = index.build_data_maps(
            index.GPTDataConfig(
                blend=["/d/a", "/d/b"], split="80,15,5", seq_length=S, num_samples=(400, 30, None)
            ),
            infos,
        )
        for name in ("valid", "test"):
            _assert_same_samples(plan.split(name), plain.split(name), len(plain.split(name)))
        assert plan.prefixes == ("/d/a", "/d/b", "/d/c")
        only_train = index.build_data_maps(_config(schedule), infos)
        assert only_train.split("valid") is None and only_train.split("test") is None
        per_split = index.build_data_maps(
            _config(
                schedule,
                blend_per_split=(["/d/d"], ["/d/d"], None),
                num_samples=(400, 20, None),
            ),
            infos,
        )
        assert per_split.prefixes == ("/d/a", "/d/b", "/d/c", "/d/d")
        assert per_split.split("train").dataset_names == ("/d/a", "/d/b", "/d/c")
        _assert_same_samples(per_split.split("train"), train_of_all(schedule, infos), 400)
        assert per_split.split("valid").dataset_names == ("/d/d",)

    def test_determinism_and_fingerprints(self, infos):
        config = _config(_schedule(*BASE))
        a = index.build_data_maps(config, infos)
        b = index.build_data_maps(config, infos)
        assert a.fingerprint == b.fingerprint
        for x, y in zip(_spans_of(a.split("train"), 400), _spans_of(b.split("train"), 400)):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a.split("train").dataset_index, b.split("train").dataset_index)
        future = _config(_schedule(*BASE[:2], (200, ("/d/a",))))
        assert index.build_data_maps(future, infos).fingerprint != a.fingerprint

    def test_fingerprint_without_schedule_unchanged(self, infos, monkeypatch):
        # The identity fields of a configuration without a schedule are those of before the
        # field existed (computed with the index code digest fixed).
        monkeypatch.setattr(maps_key, "code_digest", lambda: "x")
        config = index.GPTDataConfig(
            blend=["30", "/d/a", "70", "/d/b"], split="969,30,1", seq_length=16,
            num_samples=(300, 40, 10),
        )
        key = data_maps.plan_fingerprint(config, data_maps.config_prefixes(config), infos)
        assert key == "644fe30af12a7b9ac7c0bdd82f18f129"  # main before issue 22

    def test_wide_dtypes_when_epochs_overflow_megatrons(self, infos, monkeypatch):
        # Many epochs can overflow the int32 sample positions / uint32 shuffle rows of one epoch;
        # forced here with small limits: same samples through int64 arrays.
        config = _config(_schedule(*BASE))
        narrow = _train(config, infos)
        monkeypatch.setattr(staged_split, "_INT32_MAX", 50)
        monkeypatch.setattr(staged_split, "_UINT32_LIMIT", 50)
        wide = _train(config, infos)
        arrays, _ = data_maps.build_arrays(data_maps.DataMapsSpec.resolve(config, infos))
        assert arrays["train.shuffle_index"].dtype == arrays["train.sample_index"].dtype == np.int64
        c = wide.dataset_names.index("/d/c")
        assert wide.dataset_epochs(c) > 2
        blocks = wide.constituent(c, epoch=2)
        assert blocks.sample_index.dtype == narrow.constituent(c, epoch=2).sample_index.dtype
        _assert_same_samples(narrow, wide, 400)

    def test_draws_from_a_dataset_without_samples(self):
        tiny = random_infos(3, {"/d/a": (60, 200), "/d/t": (3, 3)})
        with pytest.raises(ValueError, match="draws .* samples from dataset '/d/t', which has no complete sample"):
            index.build_data_maps(_config(_schedule((0, ("50", "/d/a", "50", "/d/t"))), 50), tiny)

    def test_estimate(self, infos):
        config = _config(_schedule(*BASE))
        estimate = estimate_plan(config, infos)
        train = _train(config, infos)
        assert estimate.blend_sizes == {"train": 400}
        assert estimate.fingerprint == index.build_data_maps(config, infos).fingerprint
        for e in estimate.datasets:
            j = train.dataset_names.index(e.prefix)
            assert e.epochs >= train.dataset_epochs(j)
            assert e.epochs <= train.dataset_epochs(j) + 1
        assert not estimate.problems


def train_of_all(schedule, infos) -> index.SplitMaps:
    return _train(_config(schedule), infos)


class TestEdits:
    R = 150  # the resume sample: in the middle of the stage [100, 200)

    @pytest.mark.parametrize(
        ("edited", "num_samples"),
        [
            # stages after R changed (and a dataset that joins there)
            ((BASE[0], BASE[1], (200, ("10", "/d/d", "90", "/d/c"))), 400),
            # a stage inserted after R, splitting the current stage; a longer run
            ((BASE[0], BASE[1], (170, ("/d/d",)), BASE[2]), 600),
            # a stage inserted exactly at R
            ((BASE[0], BASE[1], (150, ("5", "/d/b", "5", "/d/a")), BASE[2]), 400),
            # the last stage cut at R (the run ends there)
            ((BASE[0], BASE[1]), 150),
            # the later stages removed, the current one runs longer
            ((BASE[0], BASE[1]), 600),
        ],
    )
    def test_future_edit_keeps_the_past(self, infos, edited, num_samples):
        old = _config(_schedule(*BASE))
        new = _config(_schedule(*edited), num_samples=num_samples)
        r = self.R
        _assert_same_samples(_train(old, infos), _train(new, infos), r)
        assert index.history_fingerprint(old, infos, r) == index.history_fingerprint(new, infos, r)
        assert index.build_data_maps(old, infos).fingerprint != index.build_data_maps(new, infos).fingerprint

    @pytest.mark.parametrize(
        "edited",
        [
            (BASE[0], (100, ("30", "/d/a", "70", "/d/c")), BASE[2]),  # weights of the current stage
            (BASE[0], (120, BASE[1][1]), BASE[2]),  # the current stage moved
            (BASE[0], (100, ("20", "/d/a", "80", "/d/d")), BASE[2]),  # another dataset
            (BASE[0], (90, ("/d/b",)), BASE[1], BASE[2]),  # a stage inserted before R
        ],
    )
    def test_past_edit_changes_the_history(self, infos, edited):
        old = _config(_schedule(*BASE))
        new = _config(_schedule(*edited))
        assert index.history_fingerprint(old, infos, self.R) != index.history_fingerprint(new, infos, self.R)

    def test_history_covers_what_the_past_depends_on(self, infos):
        config = _config(_schedule(*BASE))
        h = index.history_fingerprint(config, infos, self.R)
        assert index.history_fingerprint(config, infos, self.R + 1) != h
        assert index.history_fingerprint(_config(_schedule(*BASE), seed=7), infos, self.R) != h
        assert index.history_fingerprint(_config(_schedule(*BASE), seq_length=8), infos, self.R) != h
        changed = dict(infos)
        changed["/d/c"] = index.DatasetInfo("/d/c", [5] * 40, np.arange(41), "other")
        assert index.history_fingerprint(config, changed, self.R) != h
        # The content of a dataset only later stages use is not part of it.
        later = _config(_schedule(*BASE[:2], (200, ("/d/d",))))
        other_d = dict(infos)
        other_d["/d/d"] = index.DatasetInfo("/d/d", [5] * 40, np.arange(41), "other")
        assert index.history_fingerprint(later, other_d, self.R) == index.history_fingerprint(
            later, infos, self.R
        )
        # Equal weights written differently are the same history.
        scaled = _schedule(BASE[0], (100, ("2", "/d/a", "8", "/d/c")), BASE[2])
        assert index.history_fingerprint(_config(scaled), infos, self.R) == h
        # A stage starting exactly at R is the future.
        assert index.history_fingerprint(config, infos, 100) == index.history_fingerprint(
            _config(_schedule(BASE[0], (100, ("/d/d",)))), infos, 100
        )
        with pytest.raises(ValueError, match="num_samples must be an integer >= 0, got -1"):
            index.history_fingerprint(config, infos, -1)

    def test_history_without_schedule(self, infos):
        config = index.GPTDataConfig(
            blend=["30", "/d/a", "70", "/d/b"], split="90,10,0", seq_length=S,
            num_samples=(300, 10, None),
        )
        h = index.history_fingerprint(config, infos, 100)
        assert h == index.history_fingerprint(config, infos, 100)
        longer = index.GPTDataConfig(
            blend=["30", "/d/a", "70", "/d/b"], split="90,10,0", seq_length=S,
            num_samples=(600, 10, None),
        )
        assert index.history_fingerprint(longer, infos, 100) != h  # its maps differ


class TestBlendInto:
    @pytest.mark.parametrize("n", [3, 40, 1200])
    def test_out_arrays_equal_new_arrays(self, n):
        weights = index.normalize(np.random.default_rng(n).random(n) + 0.1)
        expected = blend_index.build_blending_indices(weights, 5000)
        big = (np.full(6000, -7, dtype=np.int32), np.full(6000, -7, dtype=np.int64))
        got = blend_index.build_blending_indices(weights, 5000, out=(big[0][500:5500], big[1][500:5500]))
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(big[0][500:5500], expected[0])
        assert (big[0][:500] == -7).all() and (big[1][5500:] == -7).all()

    def test_out_errors(self):
        with pytest.raises(ValueError, match="out dataset_index must be a 1-D array of 10 entries"):
            blend_index.build_blending_indices([0.5, 0.5], 10, out=(np.zeros(9, np.int16), np.zeros(10, np.int64)))
        with pytest.raises(ValueError, match="cannot hold 200 dataset ids"):
            blend_index.build_blending_indices(np.ones(200), 10, out=(np.zeros(10, np.int8), np.zeros(10, np.int64)))
        with pytest.raises(ValueError, match="expected int64"):
            blend_index.build_blending_indices([0.5, 0.5], 10, out=(np.zeros(10, np.int16), np.zeros(10, np.int32)))

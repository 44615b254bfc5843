"""DataMaps / SplitMaps behaviour, errors and fingerprints (pure, in memory; caching is in
tests/map_store/test_store.py)."""

from __future__ import annotations

import kernel_reference as reference
import numpy as np
import pytest
from helpers_data import dataset_info, three_dataset_config, three_dataset_infos

from jaxblend import index


@pytest.fixture(scope="module")
def infos():
    return three_dataset_infos()


_config = three_dataset_config


class TestSplitPlan:
    @pytest.mark.parametrize("extra", [True, False])
    def test_spans_equal_pieces_and_reference(self, infos, extra):
        plan = index.build_data_maps(_config(add_extra_token_to_sequence=extra), infos)
        train = plan.split("train")
        assert train.is_blended and train.num_datasets == 3
        ids = np.array([0, 5, len(train) - 1, 5, 17], dtype=np.int64)
        spans = train.spans(ids)
        for r, i in enumerate(ids):
            mask = spans.row == r
            got = list(
                zip(
                    spans.dataset[mask],
                    spans.sequence[mask],
                    spans.offset[mask],
                    spans.offset[mask] + spans.length[mask],
                )
            )
            pieces = train.pieces(int(i))
            assert [tuple(p) for p in pieces] == [tuple(int(x) for x in g) for g in got]
            assert sum(p.stop - p.start for p in pieces) <= train.window
            d, k = train.locate(int(i))
            maps = train.constituent(d)
            lengths = infos[train.dataset_names[d]].sequence_lengths
            expect = reference.pieces(
                lengths, maps.document_index, maps.sample_index, maps.shuffle_index, k, extra
            )
            assert [(p.sequence_id, p.start, p.stop) for p in pieces] == expect
            assert all(p.dataset_id == d for p in pieces)
        np.testing.assert_array_equal(
            train.dataset_ids(ids), [train.locate(int(i))[0] for i in ids]
        )
        assert train.dataset_ids(ids).dtype == np.int32
        assert spans.row.dtype == np.int64 and spans.dataset.dtype == np.int32

    def test_prefixes_in_order_of_first_appearance(self, infos):
        config = _config(
            blend=None,
            split=None,
            blend_per_split=[["/d/b", "/d/a"], ["/d/a", "/d/c"], ["/d/c", "/d/b"]],
            num_samples=(None, None, None),
        )
        plan = index.build_data_maps(config, infos)
        assert plan.prefixes == ("/d/b", "/d/a", "/d/c")
        assert plan.split("valid").dataset_names == ("/d/a", "/d/c")

    def test_single_dataset(self, infos):
        plan = index.build_data_maps(_config(blend=["/d/a"], num_samples=(None, None, None)), infos)
        train = plan.split("train")
        assert not train.is_blended and train.dataset_index is None
        assert train.locate(3) == (0, 3)
        assert plan.prefixes == ("/d/a",)
        spans = train.spans(np.arange(len(train)))
        assert set(np.unique(spans.row)) == set(range(len(train)))

    def test_out_of_range(self, infos):
        train = index.build_data_maps(_config(), infos).split("train")
        n = len(train)
        for bad in (n, -1):
            with pytest.raises(IndexError, match=f"{bad}.*{n}"):
                train.pieces(bad)
            with pytest.raises(IndexError, match=str(n)):
                train.spans(np.array([0, bad]))
        with pytest.raises(IndexError):
            train.locate(n)

    def test_missing_split(self, infos):
        plan = index.build_data_maps(_config(split="1,0,0"), infos)
        assert plan.split("valid") is None and plan.split("test") is None
        with pytest.raises(ValueError, match="split name"):
            plan.split("eval")


class TestSplitSubset:
    def test_subset_skips_the_other_splits_checks(self, infos):
        # A weighted blend needs a count only for the splits that are built.
        config = _config(num_samples=(300, None, None))
        with pytest.raises(ValueError, match="--valid_samples"):
            index.build_data_maps(config, infos)
        assert len(index.build_data_maps(config, infos, ["train"]).split("train")) >= 300

    def test_unknown_split_names(self, infos):
        with pytest.raises(ValueError, match="non-empty subset"):
            index.build_data_maps(_config(), infos, ("eval",))


class TestErrors:
    def test_dataset_without_tokens(self, infos):
        bad = dict(infos, **{"/d/z": dataset_info("/d/z", [0, 0])})
        with pytest.raises(ValueError, match="/d/z.*no tokens"):
            index.build_data_maps(_config(blend=["/d/z"]), bad)

    def test_samples_from_empty_split(self, infos):
        with pytest.raises(ValueError, match="no tokens"):
            index.build_data_maps(
                _config(blend=["/d/c"], split="969,30,1", num_samples=(10, 1, 1)), infos
            )

    def test_empty_split_without_count_is_empty(self, infos):
        plan = index.build_data_maps(
            _config(blend=["/d/c"], split="969,30,1", num_samples=(10, 1, None)), infos
        )
        assert len(plan.split("test")) == 0

    def test_missing_info(self, infos):
        with pytest.raises(ValueError, match="/d/q"):
            index.build_data_maps(_config(blend=["/d/q"]), infos)

    def test_weights_need_counts(self, infos):
        with pytest.raises(ValueError, match=r"num_samples\[valid\]"):
            index.build_data_maps(_config(num_samples=(10, None, 3)), infos)

    def test_callable_infos(self, infos):
        plan = index.build_data_maps(_config(), infos.__getitem__)
        assert plan.prefixes == ("/d/a", "/d/b", "/d/c")


class TestFingerprint:
    def test_covers_every_output_parameter(self, infos):
        base = index.build_data_maps(_config(), infos).fingerprint
        variants = [
            {"add_extra_token_to_sequence": False},
            {"drop_last_partial_validation_sequence": False},
            {"seed": 7},
            {"split": "80,16,4"},
            {"num_samples": (301, 40, 10)},
            {"seq_length": 17},
            {"mid_level_dataset_surplus": 0.01},
            {"blend": ["31", "/d/a", "60", "/d/b", "10", "/d/c"]},
        ]
        prints = {index.build_data_maps(_config(**v), infos).fingerprint for v in variants}
        assert base not in prints and len(prints) == len(variants)
        changed = dict(infos, **{"/d/c": dataset_info("/d/c", infos["/d/c"].sequence_lengths + 1)})
        assert index.build_data_maps(_config(), changed).fingerprint != base

    def test_ignores_paths(self, infos):
        base = index.build_data_maps(_config(), infos).fingerprint
        moved = {k.replace("/d/", "/elsewhere/"): v for k, v in infos.items()}
        blend = ["30", "/elsewhere/a", "60", "/elsewhere/b", "10", "/elsewhere/c"]
        assert index.build_data_maps(_config(blend=blend), moved).fingerprint == base

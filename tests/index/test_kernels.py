"""Numba kernels against the pure-numpy reference twins (and Megatron's C++ helpers)."""

from __future__ import annotations

import kernel_reference as reference
import numpy as np
import pytest

from jaxblend import index
from jaxblend.index import blend_index, sample_index


def _weight_cases(rng: np.random.Generator):
    for trial in range(60):
        n = int(rng.integers(1, 70))
        kind = trial % 6
        if kind == 0:
            w = rng.random(n)
        elif kind == 1:
            w = np.ones(n)  # all ties
        elif kind == 2:
            w = rng.integers(1, 4, n).astype(np.float64)  # many ties
        elif kind == 3:
            w = rng.random(n) ** 12 + 1e-15  # tiny weights
        elif kind == 4:
            w = np.round(rng.random(n), 2) + 0.01
        else:
            w = np.r_[rng.random(n - 1) * 1e-9, 1.0]  # one dominant
        yield trial, w / w.sum(), int(rng.integers(0, 2500))


class TestSampleIndex:
    @pytest.mark.parametrize("extra", [True, False])
    @pytest.mark.parametrize("drop_last", [True, False])
    def test_matches_reference(self, extra, drop_last):
        rng = np.random.default_rng(3)
        for _ in range(40):
            sizes = rng.integers(0 if not extra else 1, 40, int(rng.integers(1, 50))).astype(
                np.int32
            )
            if sizes.sum() <= 1:
                sizes[0] = 5
            docs = rng.permutation(np.tile(np.arange(len(sizes), dtype=np.int32), 2))
            seq = int(rng.integers(1, 30))
            tokens = int(sizes.sum())
            ours = index.build_sample_index(sizes, docs, seq, 2, tokens, drop_last, extra)
            n = sample_index.num_samples_in(2, tokens, seq, extra, drop_last)
            theirs = reference.sample_index(sizes, docs, seq, n, extra)
            np.testing.assert_array_equal(ours, theirs)

    def test_float32_count_quirk(self):
        # 2**24 + 1 tokens round to 2**24 in float32: the kept partial sample is lost, as in Megatron.
        assert sample_index.num_samples_in(1, 2**24 + 2, 8, True, False) == 2**21
        assert sample_index.num_samples_in(1, 2**24 + 2, 8, True, True) == 2**21
        assert sample_index.num_samples_in(1, 17, 8, True, False) == 2


class TestBlending:
    @pytest.mark.parametrize(
        "method, seed, reference_trial, reference_size", [("tree", 11, 0, 400), ("block", 21, 1, 300)]
    )
    def test_fast_methods_match_scan_and_reference(
        self, method, seed, reference_trial, reference_size
    ):
        rng = np.random.default_rng(seed)
        for trial, w, size in _weight_cases(rng):
            scan = index.build_blending_indices(w, size, method="scan")
            fast = index.build_blending_indices(w, size, method=method)
            np.testing.assert_array_equal(scan[0], fast[0], err_msg=f"trial {trial}")
            np.testing.assert_array_equal(scan[1], fast[1], err_msg=f"trial {trial}")
            assert fast[0].dtype == scan[0].dtype
            if trial % 6 == reference_trial:
                ref = reference.blending_indices(w, min(size, reference_size))
                np.testing.assert_array_equal(ref[0], fast[0][:reference_size])
                np.testing.assert_array_equal(ref[1], fast[1][:reference_size])

    @pytest.mark.parametrize(
        "seed, kind",
        list(
            enumerate(
                [
                    "random",
                    "equal",
                    "huge_and_tiny",
                    "repeated",
                    "zeros",
                    "skewed",
                    "two_scales",
                    "zipf",
                ]
            )
        ),
    )
    def test_block_matches_scan_large(self, seed, kind):
        # Many datasets and long runs, where candidate sets, bounds and theta adaptation matter.
        rng = np.random.default_rng(30 + seed)
        for n, size in [(2, 30_000), (17, 60_000), (300, 60_000), (1000, 100_000), (5000, 12_000)]:
            if kind == "random":
                w = rng.random(n) + 0.1
            elif kind == "equal":
                w = np.ones(n)
            elif kind == "huge_and_tiny":
                w = np.r_[rng.random(max(1, n // 50)) * 1e3, rng.random(n - max(1, n // 50)) * 1e-6]
                w = rng.permutation(w)
            elif kind == "repeated":
                w = rng.choice([0.1, 0.25, 0.3, 1.0 / 3.0], n)
            elif kind == "zeros":
                w = rng.random(n) * (rng.random(n) < 0.6)
                w[int(rng.integers(0, n))] = 0.5
            elif kind == "skewed":
                w = rng.random(n) ** 8 + 1e-12
            elif kind == "zipf":
                w = 1.0 / rng.permutation(np.arange(1, n + 1))
            else:
                w = np.where(rng.random(n) < 0.5, 1.0, 1.0 + 2.0**-30)
            w = w / w.sum()
            scan = index.build_blending_indices(w, size, method="scan")
            block = index.build_blending_indices(w, size, method="block")
            np.testing.assert_array_equal(scan[0], block[0], err_msg=f"{kind} n={n}")
            np.testing.assert_array_equal(scan[1], block[1], err_msg=f"{kind} n={n}")

    def test_auto_uses_block_from_threshold(self):
        rng = np.random.default_rng(22)
        for n in [blend_index.BLOCK_THRESHOLD - 1, blend_index.BLOCK_THRESHOLD, 2000]:
            w = rng.random(n) + 0.2
            w /= w.sum()
            auto = index.build_blending_indices(w, 20_000)
            scan = index.build_blending_indices(w, 20_000, method="scan")
            np.testing.assert_array_equal(auto[0], scan[0])
            np.testing.assert_array_equal(auto[1], scan[1])
        assert blend_index.block_sizes(1000) == (62, 16)
        zipf = 1.0 / np.arange(1, 1001)
        assert blend_index.heavy_datasets(zipf / zipf.sum(), 16).sum() == 8
        assert blend_index.block_sizes(16) == (32, 16)
        with pytest.raises(ValueError, match="block"):
            index.build_blending_indices([0.5, 0.5], 10, method="heap")

    @pytest.mark.parity
    def test_block_matches_megatron_helpers(self):
        helpers = pytest.importorskip("megatron.core.datasets.helpers_cpp")
        rng = np.random.default_rng(23)
        cases = [(rng.random(1000) + 0.1, 40_000), (np.ones(700), 20_000)]
        cases.append((rng.random(3000) ** 6 + 1e-9, 10_000))
        for trial, (w, size) in enumerate(cases):
            w = w / w.sum()
            di = np.zeros(size, dtype=np.int16)
            dsi = np.zeros(size, dtype=np.int64)
            helpers.build_blending_indices(di, dsi, w, len(w), size, False)
            ours = index.build_blending_indices(w, size, method="block")
            np.testing.assert_array_equal(ours[0], di, err_msg=f"trial {trial}")
            np.testing.assert_array_equal(ours[1], dsi, err_msg=f"trial {trial}")

    @pytest.mark.parametrize("distinct", [1, 2, 7, 31])
    def test_group_matches_scan(self, distinct):
        # Bit-equal weights merged into groups (round-robin members) equal the plain scan,
        # including ties across groups (values 2**-40 apart) and unnormalized weights.
        rng = np.random.default_rng(40 + distinct)
        for trial in range(12):
            n = int(rng.integers(distinct + 4, 1500))
            values = rng.random(distinct) + 0.05
            if trial % 3 == 1:
                values = 0.5 + np.arange(distinct) * 2.0**-40
            w = values[rng.integers(0, distinct, n)]
            w[int(rng.integers(0, n))] = values[0]
            if trial % 2:
                w = w / w.sum()
            size = int(rng.integers(0, 30_000))
            scan = index.build_blending_indices(w, size, method="scan")
            group = index.build_blending_indices(w, size, method="group")
            np.testing.assert_array_equal(scan[0], group[0], err_msg=f"trial {trial}")
            np.testing.assert_array_equal(scan[1], group[1], err_msg=f"trial {trial}")

    def test_auto_near_equal_weights(self):
        # Distinct weights within NEAR_EQUAL_SPREAD take the tree; still the scan's result.
        rng = np.random.default_rng(24)
        w = 1.0 + 1e-6 * rng.random(1200)
        w /= w.sum()
        auto = index.build_blending_indices(w, 30_000)
        scan = index.build_blending_indices(w, 30_000, method="scan")
        np.testing.assert_array_equal(auto[0], scan[0])
        np.testing.assert_array_equal(auto[1], scan[1])

    def test_auto_groups_ties(self):
        n = 1000
        w = np.full(n, 1.0 / n)
        dataset_index, dataset_sample_index = index.build_blending_indices(w, 5 * n + 7)
        np.testing.assert_array_equal(dataset_index, np.arange(5 * n + 7) % n)
        np.testing.assert_array_equal(dataset_sample_index, np.arange(5 * n + 7) // n)
        values, starts, members = blend_index.tie_groups(np.array([0.2, 0.5, 0.2, 0.1, 0.5]))
        np.testing.assert_array_equal(values, [0.2, 0.5, 0.1])
        np.testing.assert_array_equal(starts, [0, 2, 4, 5])
        np.testing.assert_array_equal(members, [0, 2, 1, 4, 3])
        # -0.0 and 0.0 are one weight; errors too large to separate counts are not grouped.
        assert len(blend_index.tie_groups(np.array([0.0, 1.0, -0.0]) + 0.0)[0]) == 2
        assert not blend_index._groupable(np.array([2.0**40, 1.0]), 2**12)

    def test_exhaustive_scan_and_tree_match_reference(self):
        rng = np.random.default_rng(12)
        for trial in range(60):
            n = int(rng.integers(1, 70))
            sizes = rng.integers(0, 40, n)
            sizes[int(rng.integers(0, n))] += 1
            if trial % 3 == 0:
                sizes[:] = sizes.max()
            scan = index.build_exhaustive_blending_indices(sizes, method="scan")
            tree = index.build_exhaustive_blending_indices(sizes, method="tree")
            ref = reference.exhaustive_blending_indices(sizes)
            for a, b in [(scan, tree), (scan, ref)]:
                np.testing.assert_array_equal(a[0], b[0], err_msg=f"trial {trial}")
                np.testing.assert_array_equal(a[1], b[1], err_msg=f"trial {trial}")
            assert np.array_equal(np.bincount(scan[0], minlength=n), sizes)

    @pytest.mark.parity
    def test_matches_megatron_helpers(self):
        helpers = pytest.importorskip("megatron.core.datasets.helpers_cpp")
        rng = np.random.default_rng(13)
        for trial, w, size in _weight_cases(rng):
            di = np.zeros(size, dtype=np.int16)
            dsi = np.zeros(size, dtype=np.int64)
            helpers.build_blending_indices(di, dsi, w, len(w), size, False)
            ours = index.build_blending_indices(w, size, method="tree" if trial % 2 else "scan")
            np.testing.assert_array_equal(ours[0], di)
            np.testing.assert_array_equal(ours[1], dsi)
            assert ours[0].dtype == np.int16
            sizes = rng.integers(1, 30, len(w))
            di = np.zeros(sizes.sum(), dtype=np.int16)
            dsi = np.zeros(sizes.sum(), dtype=np.int64)
            helpers.build_exhaustive_blending_indices(di, dsi, sizes, len(w))
            ours = index.build_exhaustive_blending_indices(sizes, method="tree")
            np.testing.assert_array_equal(ours[0], di)
            np.testing.assert_array_equal(ours[1], dsi)

    @pytest.mark.parity
    @pytest.mark.parametrize("kind", ["zipf", "random", "equal", "lognormal", "two_values"])
    @pytest.mark.parametrize("n", [1000, 4096])
    def test_auto_matches_megatron_helpers_wide(self, kind, n):
        # The default path at 1,000+ datasets (block or group kernel) against megatron-core.
        helpers = pytest.importorskip("megatron.core.datasets.helpers_cpp")
        rng = np.random.default_rng(n)
        w = {
            "zipf": 1.0 / np.arange(1, n + 1),
            "random": rng.random(n) + 0.1,
            "equal": np.ones(n),
            "lognormal": rng.lognormal(0.0, 2.0, n),
            "two_values": rng.choice([1.0, 3.0], n),
        }[kind]
        w = w / w.sum()
        size = 40_000 if n == 1000 else 12_000
        di = np.zeros(size, dtype=np.int16)
        dsi = np.zeros(size, dtype=np.int64)
        helpers.build_blending_indices(di, dsi, w, n, size, False)
        ours = index.build_blending_indices(w, size)
        np.testing.assert_array_equal(ours[0], di)
        np.testing.assert_array_equal(ours[1], dsi)
        assert ours[0].dtype == np.int16

    @pytest.mark.parity
    @pytest.mark.parametrize("kind", ["random", "equal", "few_values", "one_big"])
    def test_exhaustive_tree_matches_megatron_helpers_wide(self, kind):
        # Unweighted blends of TREE_THRESHOLD+ datasets take the tournament tree by default.
        helpers = pytest.importorskip("megatron.core.datasets.helpers_cpp")
        rng = np.random.default_rng(len(kind))
        n = blend_index.TREE_THRESHOLD + 476
        sizes = {
            "random": rng.integers(1, 25, n),
            "equal": np.full(n, 7),
            "few_values": rng.choice([2, 5, 11], n),
            "one_big": np.r_[rng.integers(1, 4, n - 1), 3000],
        }[kind].astype(np.int64)
        di = np.zeros(sizes.sum(), dtype=np.int16)
        dsi = np.zeros(sizes.sum(), dtype=np.int64)
        helpers.build_exhaustive_blending_indices(di, dsi, sizes, n)
        ours = index.build_exhaustive_blending_indices(sizes)
        np.testing.assert_array_equal(ours[0], di)
        np.testing.assert_array_equal(ours[1], dsi)
        scan = index.build_exhaustive_blending_indices(sizes, method="scan")
        np.testing.assert_array_equal(ours[0], scan[0])

    def test_hundred_thousand_datasets(self):
        rng = np.random.default_rng(14)
        n = 100_000
        w = rng.random(n) + 0.5
        w /= w.sum()
        dataset_index, dataset_sample_index = index.build_blending_indices(w, 3 * n)
        assert dataset_index.dtype == np.int32
        counts = np.bincount(dataset_index, minlength=n)
        assert np.all(np.abs(counts - 3 * n * w) <= 1.0 + 1e-9)
        # The greedy is prefix-stable: the first k positions of any size are the size-k blend.
        head = index.build_blending_indices(w, 1500, method="scan")
        np.testing.assert_array_equal(dataset_index[:1500], head[0])
        np.testing.assert_array_equal(dataset_sample_index[:1500], head[1])

    @pytest.mark.parametrize(
        "weights, pattern",
        [
            ([-0.5, 1.5], "negative"),
            ([np.nan, 1.0], "NaN"),
            ([0.0, 0.0], "all zero"),
            ([], "non-empty"),
        ],
    )
    def test_bad_weights(self, weights, pattern):
        with pytest.raises(ValueError, match=pattern):
            index.build_blending_indices(weights, 10)

    def test_bad_sizes(self):
        with pytest.raises(ValueError, match="size"):
            index.build_blending_indices([1.0], -1)
        with pytest.raises(ValueError, match="negative"):
            index.build_exhaustive_blending_indices([3, -1])
        with pytest.raises(ValueError, match="all zero"):
            index.build_exhaustive_blending_indices([0, 0])

    def test_dtype_switch(self):
        assert blend_index.dataset_index_dtype(32766) == np.int16
        assert blend_index.dataset_index_dtype(32767) == np.int32


def test_reseeded_random_state_equals_a_fresh_one():
    from jaxblend.index import gpt

    used = gpt._random_state(7)
    used.shuffle(np.arange(1000))  # advance it
    for seed in (1234, 0, 2**32 - 1):
        fresh = np.random.RandomState(seed)
        again = gpt._random_state(seed)
        a, b = np.arange(5000), np.arange(5000)
        fresh.shuffle(a)
        again.shuffle(b)
        np.testing.assert_array_equal(a, b)
        assert fresh.randint(0, 2**31) == again.randint(0, 2**31)

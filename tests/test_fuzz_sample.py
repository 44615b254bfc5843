"""A small seeded sample of the fuzz campaigns in benchmarks/fuzz.py (the full runs are not CI).

Each mutated `.idx`, preprocessing input or cache entry must give a clean error naming the file
or correct output; every mutation kind must occur in the sample.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fuzz():
    spec = importlib.util.spec_from_file_location("jaxblend_fuzz", os.path.join(REPO, "benchmarks", "fuzz.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


fuzz = _fuzz()
SAMPLE = {"idx": (200, fuzz.IDX_KINDS), "preprocess": (120, fuzz.INPUT_KINDS), "cache": (80, fuzz.CACHE_KINDS)}


@pytest.mark.parametrize("campaign", sorted(SAMPLE))
def test_seeded_sample(campaign, tmp_path):
    count, kinds = SAMPLE[campaign]
    tally = fuzz.run(campaign, count, seed=20261123, workdir=str(tmp_path))
    assert not tally.failures, "\n".join(tally.failures)
    seen = {k for (_, k, _) in tally.counts}
    assert seen == set(kinds), set(kinds) - seen
    assert sum(tally.counts.values()) == count


def test_a_wrong_output_is_a_failure(tmp_path):
    # The classifier itself: an error that does not name the file, or a foreign type, fails.
    assert fuzz._classify_error(ValueError("bad header in /x/case.idx"), ["/x/case"]) == fuzz.CLEAN
    assert fuzz._classify_error(ValueError("bad header"), ["/x/case"]) == fuzz.FAILURE
    assert fuzz._classify_error(IndexError("/x/case"), ["/x/case"]) == fuzz.FAILURE


# Cases the full campaigns once failed (campaign, seed): corrupt Parquet pages and gzip streams
# raised errors that did not name the file; a cache manifest with a foreign `meta` raised KeyError.
PAST_FAILURES = [("preprocess", 459), ("preprocess", 1841), ("preprocess", 2246),
                 ("preprocess", 3933), ("preprocess", 181), ("cache", 189)]


@pytest.mark.parametrize("campaign,seed", PAST_FAILURES)
def test_past_failures_stay_fixed(campaign, seed, tmp_path):
    tally = fuzz.run(campaign, 1, seed=seed, workdir=str(tmp_path))
    assert not tally.failures, tally.failures

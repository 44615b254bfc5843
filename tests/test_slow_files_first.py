"""The suite's file order (plugin `slow_files_first`): the files that take longest run first, a
new file before all of them, each file's tests together and in their own order."""

from __future__ import annotations

import os

import pytest
import slow_files_first as order

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.index.test_kernels" name="test_a" time="1.5" />
<testcase classname="tests.index.test_kernels" name="test_b[x-1]" time="2.0" />
<testcase classname="tests.test_train.TestResume" name="test_c" time="30.25" />
<testcase classname="tests.test_train" name="test_d" time="0.25" />
<testcase classname="tests.loading.test_loader.TestLoader.TestInner" name="test_e" time="4" />
</testsuite></testsuites>
"""


def test_slowest_files_first_and_each_file_keeps_its_order():
    nodeids = [
        "tests/a/test_fast.py::test_1",
        "tests/test_slow.py::test_1",
        "tests/a/test_fast.py::test_2",
        "tests/test_new.py::test_1",
        "tests/test_slow.py::TestX::test_2[p]",
        "tests/test_medium.py::test_1",
        "tests/test_new.py::test_2",
    ]
    weights = {"tests/a/test_fast.py": 0.5, "tests/test_slow.py": 90.0,
               "tests/test_medium.py": 12.0, "tests/test_gone.py": 500.0}
    reordered = [nodeids[i] for i in order.slowest_first(nodeids, weights)]
    assert reordered == [
        "tests/test_new.py::test_1",  # not in the list: first
        "tests/test_new.py::test_2",
        "tests/test_slow.py::test_1",
        "tests/test_slow.py::TestX::test_2[p]",
        "tests/test_medium.py::test_1",
        "tests/a/test_fast.py::test_1",
        "tests/a/test_fast.py::test_2",
    ]


def test_seconds_per_file_from_a_junit_report(tmp_path):
    report = tmp_path / "run.xml"
    report.write_text(JUNIT)
    assert order.seconds_per_file(str(report)) == {
        "tests/index/test_kernels.py": 3.5,
        "tests/test_train.py": 30.5,
        "tests/loading/test_loader.py": 4.0,
    }


def test_written_weights_read_back_longest_first(tmp_path):
    path = tmp_path / "file_seconds.txt"
    order.write_weights({"tests/b/test_x.py": 2.04, "tests/test_y.py": 71.0}, str(path))
    lines = path.read_text().splitlines()
    assert lines[1:] == ["71.0 tests/test_y.py", "2.0 tests/b/test_x.py"]
    assert order.read_weights(str(path)) == {"tests/test_y.py": 71.0, "tests/b/test_x.py": 2.0}


def test_a_bad_line_names_the_file_line_and_the_fix(tmp_path):
    path = tmp_path / "file_seconds.txt"
    path.write_text("1.0 tests/test_a.py\ntests/test_b.py 2.0\n")
    with pytest.raises(ValueError, match=r"file_seconds.txt:2: expected 'seconds path'.*"
                                         r"python3 tests/slow_files_first.py <junit.xml>"):
        order.read_weights(str(path))


def test_the_checked_in_list_reads_and_names_test_files():
    weights = order.read_weights()
    assert weights, order.WEIGHTS
    for name in weights:
        assert name.startswith("tests/") and os.path.basename(name).startswith("test_"), name
    # The slow end-to-end files are known, so they are ordered by their time, not run first blind.
    assert "tests/test_train.py" in weights


def test_the_suite_runs_in_the_listed_order(pytester, monkeypatch, tmp_path):
    pytester.makepyfile(
        test_quick="def test_q1():\n    pass\n\ndef test_q2():\n    pass\n",
        test_long="def test_l():\n    pass\n",
        test_unlisted="def test_u():\n    pass\n",
    )
    weights = tmp_path / "file_seconds.txt"
    weights.write_text("9.0 test_long.py\n1.0 test_quick.py\n")
    monkeypatch.setattr(order, "WEIGHTS", str(weights))
    result = pytester.runpytest("-v", "-p", "no:cacheprovider", "-p", "slow_files_first")
    result.assert_outcomes(passed=4)
    ran = [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
    assert ran == ["test_unlisted.py::test_u", "test_long.py::test_l", "test_quick.py::test_q1",
                   "test_quick.py::test_q2"]

"""The strict-skip rule itself: under JAXBLEND_STRICT_EXTRAS=1 every kind of skip fails the run."""

from __future__ import annotations

import os

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

MODULE_IMPORTORSKIP = """
import pytest
pytest.importorskip("jaxblend_no_such_module_anywhere")

def test_never_runs():
    pass
"""

MODULE_CUSTOM_SKIP = """
import pytest
pytest.skip("needs the beam extra", allow_module_level=True)

def test_never_runs():
    pass
"""

PYTESTMARK_SKIP = """
import pytest
pytestmark = pytest.mark.skip(reason="not today")

def test_skipped_by_mark():
    pass
"""

RUNTIME_SKIPS = """
import pytest

def test_importorskip_inside():
    pytest.importorskip("jaxblend_no_such_module_anywhere")

@pytest.mark.skipif(True, reason="some condition")
def test_skipif():
    pass

@pytest.mark.allowed_skip("only meaningful on Windows")
def test_allowed():
    pytest.skip("not on this operating system")

@pytest.mark.allowed_skip("")
def test_empty_reason_is_not_a_reason():
    pytest.skip("whatever")

@pytest.mark.parametrize("case", [])
def test_empty_parametrization(case):
    pass

def test_passes():
    pass
"""


def _run(pytester, monkeypatch, strict: bool, **modules):
    monkeypatch.setenv("PYTHONPATH", TESTS_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if strict:
        monkeypatch.setenv("JAXBLEND_STRICT_EXTRAS", "1")
    else:
        monkeypatch.delenv("JAXBLEND_STRICT_EXTRAS", raising=False)
    pytester.makepyfile(**modules)
    return pytester.runpytest_subprocess("-p", "strict_skips", "-p", "no:cacheprovider", "-rA")


@pytest.mark.parametrize(
    "source", [MODULE_IMPORTORSKIP, MODULE_CUSTOM_SKIP], ids=["importorskip", "custom_reason"]
)
def test_collection_time_skip_fails_when_strict(pytester, monkeypatch, source):
    result = _run(pytester, monkeypatch, True, test_mod=source)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*skipped at collection under JAXBLEND_STRICT_EXTRAS=1*"])
    assert result.parseoutcomes().get("errors") == 1


def test_collection_time_skip_is_a_skip_when_not_strict(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, False, test_mod=MODULE_IMPORTORSKIP)
    assert result.ret == 5  # nothing ran: pytest's "no tests collected"
    assert result.parseoutcomes().get("skipped") == 1


def test_runtime_skips_fail_unless_allowed(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, True, test_mod=RUNTIME_SKIPS, test_marks=PYTESTMARK_SKIP)
    assert result.ret == 1
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("skipped") == 1, outcomes
    # Skips raised in setup (marks, empty parametrization) surface as errors, the others as failures.
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == 5, outcomes
    result.stdout.fnmatch_lines(["SKIPPED*not on this operating system*"])
    for name in (
        "test_importorskip_inside",
        "test_skipif",
        "test_empty_reason_is_not_a_reason",
        "test_empty_parametrization*",
        "test_skipped_by_mark",
    ):
        result.stdout.fnmatch_lines([f"*{name}: skipped under JAXBLEND_STRICT_EXTRAS=1*"])


def test_runtime_skips_are_skips_when_not_strict(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, False, test_mod=RUNTIME_SKIPS)
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and outcomes.get("passed") == 1 and outcomes.get("skipped") == 5, outcomes

"""pytest plugin: under JAXBLEND_STRICT_EXTRAS=1 (set by `dev.py test`, i.e. in CI) no test may skip.

CI installs every extra and runs on a known machine, so a skip there hides a broken install or a
test that silently stopped running. Every kind of skip is turned into a failure:

* a skip while running a test (`pytest.skip`, `pytest.importorskip` inside the test, `skipif`);
* a skip while collecting a module (module-level `pytest.importorskip`, `pytestmark` skips,
  `pytest.skip(allow_module_level=True)`);
* a parametrization that produced no cases (pytest reports it as a skip).

The only exception is a test marked `@pytest.mark.allowed_skip("reason")`, where the reason
names why skipping is correct on every machine (e.g. a feature of another operating system). A
collection-level skip has no test to carry the marker, so it always fails under the rule.

Outside strict mode (a developer's checkout without some extras) skips behave as usual.
"""

from __future__ import annotations

import os

import pytest

ENV = "JAXBLEND_STRICT_EXTRAS"
MARKER = "allowed_skip"


def _strict() -> bool:
    return os.environ.get(ENV) == "1"


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(reason): this test may skip under {ENV}=1; the reason must hold on every machine",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if _strict() and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid or collector.name}: skipped at collection under {ENV}=1 "
            f"({_reason(report)}); a module may not skip in CI - install the extra or mark the "
            f"individual tests @pytest.mark.{MARKER}(reason)"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (_strict() and report.skipped) or hasattr(report, "wasxfail"):
        return
    marker = item.get_closest_marker(MARKER)
    allowed = marker.args[0] if marker is not None and marker.args else None
    if isinstance(allowed, str) and allowed.strip():
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid}: skipped under {ENV}=1 ({_reason(report)}); mark it "
        f"@pytest.mark.{MARKER}(reason) only if the reason holds on every machine"
    )

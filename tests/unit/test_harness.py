"""The test harness itself (tests/conftest.py): what keeps ``tox``'s test run short."""

from __future__ import annotations

import sys

import pytest


@pytest.mark.no_cover
def test_a_no_cover_test_runs_untraced():
    # under `tox` (pytest-cov with pytest-xdist) an xdist worker holds two coverages, and
    # pytest-cov's own pause resumed the second: conftest's pytest_runtest_call stops both
    assert sys.gettrace() is None


def test_other_tests_are_traced_when_coverage_runs(request):
    plugin = request.config.pluginmanager.getplugin("_cov")
    if plugin is None or plugin.cov_controller is None:
        assert sys.gettrace() is None  # (--no-cov: nothing traces)
    else:
        assert sys.gettrace() is not None

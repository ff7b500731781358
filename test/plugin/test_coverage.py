"""pytest-cov reports the lines isolated tests ran, as it does for in-process tests.

A child leaves through ``os._exit``, which skips coverage.py's save at exit;
the child saves its data itself, into a file of its own that pytest-cov
combines with the others.
"""

from __future__ import annotations

import pytest

import pytest_cov  # noqa: F401 - CI installs it (requirements/ci.txt); without it this check must fail

LIBRARY = """
def used(x):
    if x > 0:
        return "positive"
    return "other"


def used_by_the_second_test():
    return "second"


def unused():
    return "never"
"""

TESTS = """
import pytest
import mylib

def test_used():
    assert mylib.used(1) == "positive"

@pytest.mark.npu_lazy(preload=[])
def test_marked():
    assert mylib.used_by_the_second_test() == "second"
"""


def _coverage_line(run) -> str:
    lines = [line for line in run.result.stdout.lines if line.startswith("mylib.py")]
    assert len(lines) == 1, run.text()
    return " ".join(lines[0].split())


@pytest.mark.parametrize("extra", [(), pytest.param(("-n", "2"), marks=pytest.mark.needs("xdist")), ("--npu-lazy-isolation=spawn",)],
                         ids=["fork", "xdist", "spawn"])
def test_isolated_tests_report_the_same_coverage(run_pytest, pytester, extra):
    pytester.makepyfile(mylib=LIBRARY, test_cov=TESTS)
    cov = ("--cov=mylib", "--cov-report=term-missing", *extra)
    in_process = run_pytest(*cov, "--npu-lazy-isolate=off")
    isolated = run_pytest(*cov, "--npu-lazy-isolate=all", "--npu-lazy-preload=")
    assert set(isolated.outcomes.values()) == {"passed"}, isolated.text()
    assert _coverage_line(in_process) == "mylib.py 8 2 75% 4, 12"
    assert _coverage_line(isolated) == _coverage_line(in_process), isolated.text()
    assert not list(pytester.path.glob(".coverage.*")), "every child's data file was combined"

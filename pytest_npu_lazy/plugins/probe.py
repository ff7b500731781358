"""The probe's plugin: the ``npu_lazy`` marker and fixture, the runner phases, and a test's report attributes.

These hooks run wherever a test runs: in-process, in an xdist worker and in an
isolated child alike (a child inherits them with the fork), so the fixture and
the phases behave the same in every process.
"""

from __future__ import annotations

from typing import Generator, Iterator

import pytest

from ..errors import NpuLazyError
from ..probe import fixture as probe
from ..probe.recorder import RECORDER
from ..probe.summary import ERROR_ATTRIBUTE
from ..settings import MARKER_HELP, add_probe_options, session_resolver


def pytest_addoption(parser: pytest.Parser) -> None:
    add_probe_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    RECORDER.install(phase="pytest")  # when loaded after conftests (pytester, -p in an ini file)


def _phase_switch(item: pytest.Item, when: str) -> None:
    state = probe.active_state()
    if state is not None and state.nodeid == item.nodeid:
        state.runner_phase(when)


# Plain hooks, not wrappers: a wrapper's frames would show in the native traceback of every failing test.
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _phase_switch(item, "setup")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _phase_switch(item, "test")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _phase_switch(item, "teardown")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(NpuLazyError):
        setattr(report, ERROR_ATTRIBUTE, True)  # shown as ERROR: the test could not be judged
    violation = getattr(call.excinfo.value, probe.VIOLATION_ATTRIBUTE, None) if call.excinfo is not None else None
    if violation is not None:
        setattr(report, probe.VIOLATION_ATTRIBUTE, violation)  # serialised with the report, from any child
    return report


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    if getattr(report, ERROR_ATTRIBUTE, False) and report.failed:
        return "error", "E", "ERROR"
    return None


@pytest.fixture
def npu_lazy(request: pytest.FixtureRequest) -> Iterator[probe.NpuLazy]:
    """Deferred-loading probe: phases, compile-vs-eager, assert_(not_)loaded, ran, block."""
    resolver = session_resolver(request.config)
    with probe.probe_for(request.node, lambda: resolver.for_item(request.node), resolver.isolate) as lazy:
        yield lazy

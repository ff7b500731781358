"""A module zygote: import and collect one test module once, then fork a child per test from it.

Collecting in each test's own child costs an import and a collection per
test (0.1 to 1 s on real suites, seconds for a module with thousands of
parametrized cases); pytest-forked pays neither, because it forks after
collection. A module zygote is forked from the baseline zygote, applies the
tests' marker (blocks, tracking), imports and collects the module, and then
serves forks like any zygote. Each test child still starts from its module
freshly imported and untouched by its siblings, and the probe state made for
the collection becomes the test's own: its collect phase, and every module
the import loaded, are in the test's report as they would have been.
"""

from __future__ import annotations


import pytest

from ..probe import state as probe
from ..settings import TestSettings
from .child import (ChildRelay, CollectionObserver, TestRun, become_forked_child, collect_in_phase,
                    leave_pytest_roles, serve_test)
from .inherit import adopt_basetemp, private_capture
from .outputs import silence_terminal
from ..forks.channel import Channel
from .target import Target, TargetError


class WarningKeeper(CollectionObserver):
    """Also keeps the warnings collection raised: the first child forked hands them on, once."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[tuple] = []

    def pytest_warning_recorded(self, warning_message, when: str, nodeid: str, location) -> None:
        self.warnings.append((warning_message, when, nodeid, location))


class ModuleCollection:
    """What a module zygote did once for every test of its module: the marker, the import, the collection."""

    def __init__(self, session: pytest.Session, settings: TestSettings, target: Target) -> None:
        config = session.config
        leave_pytest_roles(config)
        private_capture(config)  # what the import prints must not land in the pytest process's capture files
        silence_terminal(config)  # nor what collecting says ("collected 6 items") in its terminal
        adopt_basetemp(config, target.basetemp)
        self.observer = WarningKeeper()
        config.pluginmanager.register(self.observer, "npu_lazy_module_collection")
        self.state = probe.ProbeState.for_settings(settings, target.nodeid)
        probe.set_active_state(self.state)
        #: ``problem``: the text of every test's error when not None
        self.items, self.problem = collect_in_phase(self.state, settings, session, target)
        config.pluginmanager.unregister(self.observer)
        self.forked = 0


def not_found(nodeid: str) -> str:
    """Why a test the pytest process collected is not among its module's items here, as pytest says it."""
    return (f"npu_lazy: pytest could not collect {nodeid!r} in the isolated child:\nnot found: {nodeid}\n"
            "(its module, imported and collected again there, has no such test: a collection hook left it out, "
            "or the module defines its tests differently on each import)")


def serve_collected_child(channel: Channel, session: pytest.Session, module: ModuleCollection) -> None:
    """Entry point of a child forked from a module zygote: find the test among the module's items, run it."""
    first = module.forked == 0
    relay: ChildRelay = become_forked_child(channel, session.config)
    relay.collect_failures[:] = module.observer.collect_failures
    relay.deselected[:] = module.observer.deselected
    if first:  # collection's warnings, once for the module as in-process
        for warning_message, when, nodeid, location in module.observer.warnings:
            relay.send_warning(warning_message, when, nodeid, location)

    def ready(settings: TestSettings, target: Target) -> tuple[TestRun, bool]:
        run = TestRun(relay, settings, target, state=module.state)
        if module.problem is not None:
            run.not_run(module.problem, error=True)
            return run, True
        try:
            run.find(module.items)
        except TargetError as exc:
            run.not_run(f"npu_lazy: {exc}", error=True)
        else:
            if run.item is None and not module.observer.collect_failures:
                run.not_run(not_found(run.nodeid), error=True)
        return run, True

    serve_test(channel, ready)

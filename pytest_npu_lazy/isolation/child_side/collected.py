"""A test child forked from a module zygote: find its test among the module's items, and run it.

The module zygote (:mod:`pytest_npu_lazy.isolation.zygote_side.module_collection`)
imported and collected the module once; a child forked from it takes its
test from those items instead of collecting again, and hands on what the
collection said (failed collectors, deselections, its warnings once).
"""

from __future__ import annotations

import pytest

from ...forks.channel import Channel
from ...settings import TestSettings
from ..target import Target, TargetError
from .child import ChildRelay, TestRun, become_forked_child, serve_test


def not_found(nodeid: str) -> str:
    """Why a test the pytest process collected is not among its module's items here, as pytest says it."""
    return (f"npu_lazy: pytest could not collect {nodeid!r} in the isolated child:\nnot found: {nodeid}\n"
            "(its module, imported and collected again there, has no such test: a collection hook left it out, "
            "or the module defines its tests differently on each import)")


def serve_collected_child(channel: Channel, session: pytest.Session, module) -> None:
    """Entry point of a child forked from a module zygote: find the test among the module's items, run it."""
    first = module.forked == 0
    relay: ChildRelay = become_forked_child(channel, session.config)
    relay.collect_failures[:] = module.observer.collect_failures
    relay.deselected[:] = module.observer.deselected
    if first:  # collection's warnings, once for the module as in-process
        for warning_message, when, nodeid, location in module.observer.warnings:
            relay.send_warning(warning_message, when, nodeid, location)

    def ready(settings: TestSettings, target: Target, earlier: int) -> tuple[TestRun, bool]:
        # the module's collection state is the first test's; a next test of a kept child starts a state of its own
        run = TestRun(relay, settings, target, state=None if earlier else module.state, earlier=earlier)
        if module.problem is not None:
            run.not_run(module.problem, error=True)
            return run, True
        try:
            run.find(module.items, module.index)
        except TargetError as exc:
            run.not_run(f"npu_lazy: {exc}", error=True)
        else:
            if run.item is None and not module.observer.collect_failures:
                run.not_run(not_found(run.nodeid), error=True)
        return run, True

    serve_test(channel, ready, shareable=True)

"""A module zygote's one collection: import and collect one test module once, for every test child forked from it.

Collecting in each test's own child costs an import and a collection per
test (0.1 to 1 s on real suites, seconds for a module with thousands of
parametrized cases); pytest-forked pays neither, because it forks after
collection. A module zygote is forked from the baseline zygote, applies the
tests' marker (blocks, tracking), imports and collects the module, and then
serves forks like any zygote (:mod:`.server`). Each test child still starts
from its module freshly imported and untouched by its siblings
(:mod:`pytest_npu_lazy.isolation.child_side.collected`), and the probe state
made for the collection becomes the test's own: its collect phase, and every
module the import loaded, are in the test's report as they would have been.
"""

from __future__ import annotations

import pytest

from ...probe import state as probe
from ...settings import TestSettings
from ..child_side.child import CollectionObserver, collect_in_phase, leave_pytest_roles, register_relay
from ..child_side.find import index_by_nodeid
from ..child_side.inherit import adopt_basetemp, private_capture
from ..child_side.outputs import silence_terminal
from ..target import Target


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
        register_relay(config)  # once for all its children, after the collection it must not observe
        self.index = self.prepare_items()
        self.state.freeze_imports()
        self.forked = 0

    def prepare_items(self) -> dict[str, pytest.Item]:
        """What every child would otherwise work out again for its own test, worked out once here: the items
        by node id (with the deselected ones, which a child may still run) and each item's location (a cached
        property of pytest's that reads the test's source position; every report carries it)."""
        items = [*self.items, *self.observer.deselected]
        for item in items:
            try:
                item.location  # noqa: B018 - reading pytest's cached property computes it once, here
            except Exception:  # the child computes it again, and reports what it raises where pytest would
                pass
        return index_by_nodeid(items)

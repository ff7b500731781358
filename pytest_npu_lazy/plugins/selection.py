"""The selection plugin: taking a selection map (which lines of torch_npu each test's phases run), and running
only the tests a change can affect, with one.

The map's tracer starts before the conftests, so that what they import of
torch_npu is measured too. xdist's controller runs no test: it takes no lines
but writes the map its workers' reports carry; a spawned test child only takes
lines, which travel home with its reports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .. import role
from ..settings import add_selection_options, map_settings

if TYPE_CHECKING:
    from ..selection.tracer import EvidenceTracer

_TRACER = pytest.StashKey["EvidenceTracer"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_selection_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """After the CANN plugin's (registered later, so called first): the CANN is active when lines are taken."""
    if getattr(early_config.known_args_namespace, "npu_lazy_take_map", False):
        _start_tracer(early_config)


def _start_tracer(config: pytest.Config) -> EvidenceTracer:
    tracer = config.stash.get(_TRACER, None)
    if tracer is not None:
        return tracer
    from ..selection.pytest_side import start_tracer
    from ..selection.sources import SelectionError

    try:
        tracer = config.stash[_TRACER] = start_tracer(tuple(config.getini("npu_lazy_map_packages")))
    except SelectionError as exc:
        raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None
    return tracer


def pytest_configure(config: pytest.Config) -> None:
    settings = map_settings(config)
    this = role.of(config)
    if settings.take:
        tracer = _start_tracer(config)  # loaded after the conftests (an ini file's -p, pytester)
        from ..selection.pytest_side import MapTaker, MapWriter

        if this.controller:
            tracer.coverage.stop()  # xdist's controller runs no test
        else:
            config.pluginmanager.register(MapTaker(tracer), "npu_lazy_map_taker")
        if this.reports:
            config.pluginmanager.register(MapWriter(settings.path, settings.packages, list(config.invocation_params.args),
                                                    settings.shard), "npu_lazy_map_writer")
        if settings.shard is not None and not this.child and not this.controller:
            from ..selection.pytest_side import ShardFilter

            config.pluginmanager.register(ShardFilter(config, settings.shard, tracer), "npu_lazy_shard_filter")
    if settings.changed is not None and not this.child:
        from ..selection.map import SelectionMap
        from ..selection.pytest_side import ChangeFilter, changes_for
        from ..selection.sources import SelectionError

        try:
            change_filter = ChangeFilter(config, changes_for(config, settings.changed),
                                         SelectionMap.read(settings.path), settings.path, settings.ignore)
        except SelectionError as exc:
            raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None
        config.pluginmanager.register(change_filter, "npu_lazy_change_filter")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """After the reports' lines (this plugin is registered after theirs)."""
    lines = []
    change_filter = config.pluginmanager.get_plugin("npu_lazy_change_filter")
    if change_filter is not None:
        lines.extend(change_filter.header())
    writer = config.pluginmanager.get_plugin("npu_lazy_map_writer")
    if writer is not None:  # the settings it was made with, not resolved a second time
        lines.append(f"npu_lazy: taking a selection map (lines of {', '.join(writer.packages)} each test runs, "
                     f"measured by coverage.py) for {writer.path}")
    return lines

"""The reports' plugin: the header, the end-of-run section, the JSON, JUnit and HTML reports, the import budget
gate, and the requires_npu gate.

The :class:`~pytest_npu_lazy.reports.reporter.Reporter` is registered in every
process, and writes only where the role says pytest's reports are logged for
good. The NPU gate asks whether a real device is usable: never in a test child,
whose parent already knows.
"""

from __future__ import annotations

import pytest

from .. import role
from ..settings import add_budget_options, session_resolver


def pytest_addoption(parser: pytest.Parser) -> None:
    from ..reports.reporter import add_options

    add_options(parser)
    add_budget_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    from ..reports import known_warnings
    from ..reports.environment import NpuGate
    from ..reports.reporter import Reporter
    from .cann import status as cann_status  # a sibling plugin: imported once registered, to be rewritten

    status = cann_status(config)
    known_warnings.hide(config, status)  # the header says why; the user's own filters still win
    this = role.of(config)
    gate = None if this.child else NpuGate(status)
    config.pluginmanager.register(Reporter(config, session_resolver(config), status, gate), "npu_lazy_reporter")
    if gate is None:
        return
    config.pluginmanager.register(gate, "npu_lazy_npu_gate")
    if config.getoption("npu_lazy_require_npu") and not this.worker:
        gate.require()


def pytest_report_header(config: pytest.Config) -> list[str]:
    from ..probe import inductor_cache
    from ..reports.environment import describe
    from .cann import status as cann_status

    gate = config.pluginmanager.get_plugin("npu_lazy_npu_gate")
    policy = session_resolver(config).inductor_cache  # said under --npu-lazy-isolate=off too: one header
    return describe(cann_status(config), gate.answer if gate else None).header_lines(
        verbose=config.option.verbose > 0, inductor_cache=(policy, inductor_cache.DESCRIPTIONS[policy]))

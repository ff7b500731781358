"""What an isolated test wrote besides its reports, written by the pytest process: terminal lines, JUnit
XML extras, warnings.

The child sends its terminal writes and JUnit extras home
(:mod:`pytest_npu_lazy.isolation.child_side.outputs`); here they go where the
test's own would have gone in-process. Warnings a child or zygote captured
are recorded here as pytest records its own; the plugin's own warnings pass
through the run's warning filters first.

The pytest internals this needs (the JUnit XML object and its node
reporters, the warning filters) are reached through ``pytest_npu_lazy.compat``.
"""

from __future__ import annotations

import re
import warnings

import pytest

from ... import compat
from ..messages import Junit


def show_terminal_text(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write(text, flush=True)


def add_junit_extras(config: pytest.Config, report: pytest.TestReport, extras: Junit) -> None:
    """Before the teardown report is logged: what record_xml_attribute and record_testsuite_property recorded."""
    xml = compat.junit_xml(config)
    if xml is None:
        return
    if extras.attributes:
        reporter = xml.node_reporter(report)
        for name, value in extras.attributes:
            reporter.add_attribute(name, value)
    for name, value in extras.suite_properties:
        xml.add_global_property(name, value)


#: a terminal control sequence (CSI): colours (``\x1b[31;20m``), cursor moves
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    """``text`` without terminal control sequences.

    Some libraries colour their warnings' text themselves (triton-ascend
    wraps "[Errno 2] No such file or directory: 'ccec'" in red); pytest's
    warnings summary prints the text as it is, so a log shows the raw codes.
    """
    return _CONTROL.sub("", text)


def _without_control(warning_message: warnings.WarningMessage) -> warnings.WarningMessage:
    text = str(warning_message.message)
    if "\x1b" not in text:
        return warning_message
    category = warning_message.category or UserWarning
    try:
        message = category(plain(text))
    except Exception:  # a category whose constructor wants more than a text
        category = UserWarning
        message = UserWarning(plain(text))
    return warnings.WarningMessage(message, category, warning_message.filename, warning_message.lineno,
                                   warning_message.file, warning_message.line, warning_message.source)


def record_warning(config: pytest.Config, warning_message, nodeid: str = "", when: str = "runtest",
                   location=None) -> None:
    """A warning for the summary, as pytest records one: every warning this plugin shows goes through here.

    What children and zygotes captured arrives with its text as the library
    wrote it; terminal control sequences are removed before it is shown.
    """
    config.hook.pytest_warning_recorded.call_historic(kwargs=dict(
        warning_message=_without_control(warning_message), when=when, nodeid=nodeid, location=location))


def record_warning_text(config: pytest.Config, text: str, nodeid: str = "", filename: str = "",
                        category: type[Warning] | None = None) -> None:
    """``text`` as a warning of ``category`` (default: NpuLazyWarning) in the summary.

    It goes through the run's ``filterwarnings`` and ``-W`` as a test's
    warning would: ``ignore`` hides it (the filters the header explains
    among them), ``error`` still shows it (it belongs to no test that
    could fail).
    """
    from ...errors import NpuLazyWarning

    category = category or NpuLazyWarning
    for message in compat.filter_warning(config, category(plain(text)), filename):
        record_warning(config, message, nodeid=nodeid)

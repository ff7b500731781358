"""What an isolated test writes besides its reports: terminal lines, JUnit XML extras, warnings.

In-process, live logs (``log_cli``), ``--setup-show`` lines and anything else
written through the terminal writer appear while the test runs, and
``record_xml_attribute`` / ``record_testsuite_property`` write into the JUnit
XML object of the pytest process. A child has copies of both, which nobody
reads. So the child's terminal writer sends what it is given home as
``terminal`` messages, and the JUnit extras travel as one ``junit`` message
before the teardown report; the pytest process writes both where its own
would have gone. Progress lines and results are not sent: the pytest process
prints those from the reports, as for any test.

Warnings a child or zygote captured are recorded here, in the pytest
process, as pytest records its own; the plugin's own warnings pass through
the run's warning filters first.

The pytest internals this needs (the JUnit XML object and its node
reporters, the terminal reporter's writer, the warning filters) are reached
through ``pytest_npu_lazy.compat``.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

from .. import compat
from .messages import Junit, Terminal
from ..forks.channel import send


def _xml(config: pytest.Config):
    return compat.junit_xml(config)


# -- in the child -------------------------------------------------------------

class _ChannelFile:
    """A text file whose writes become ``terminal`` messages while the test runs, and go nowhere otherwise.

    ``outputs`` is None in a module zygote, which has no pytest process to
    write to: what its collection writes was already shown when the pytest
    process collected.
    """

    def __init__(self, outputs: "ChildOutputs | None" = None) -> None:
        self.outputs = outputs

    def write(self, text: str) -> int:
        if self.outputs is not None and self.outputs.sending and text:
            send(self.outputs.channel, Terminal(text))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class _TerminalStandIn:
    """Registered as ``terminalreporter`` in a child or module zygote: its writer, without its hooks.

    Code that writes through ``config.get_terminal_writer()`` or the reporter
    (live logging, ``--setup-show``, pytest-timeout's stack dump) reaches the
    pytest process; the reporter's own hooks, which would print the child's
    progress and results, are not registered.
    """

    def __init__(self, reporter: Any, file: _ChannelFile) -> None:
        self._reporter = reporter
        self._file = file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reporter, name)


def silence_terminal(config: pytest.Config) -> "_ChannelFile | None":
    """Take the terminal reporter's hooks and writer away from this process; the file it now writes to.

    A forked test child and a module zygote are copies of the pytest
    process, terminal reporter included: left registered, its hooks print
    the copy's own collection ("collected 6 items", the file name before
    the progress dots) into the pytest process's terminal, in the middle of
    its progress line. What they would say, the pytest process says from
    its own collection and from the reports. A module zygote silences it
    before it collects; the children forked from it find it silenced and
    only point its file at their channel.
    """
    manager = config.pluginmanager
    reporter = manager.get_plugin("terminalreporter")
    if reporter is None:
        return None
    if isinstance(reporter, _TerminalStandIn):
        return reporter._file
    file = _ChannelFile()
    compat.redirect_terminal_writer(reporter, file)
    manager.unregister(reporter)
    manager.register(_TerminalStandIn(reporter, file), "terminalreporter")
    return file


class ChildOutputs:
    """The child's terminal and JUnit extras, sent to the pytest process."""

    def __init__(self, channel, config: pytest.Config) -> None:
        self.channel = channel
        self.sending = False  # collection output was shown when the pytest process collected
        file = silence_terminal(config)
        if file is not None:
            file.outputs = self
        manager = config.pluginmanager
        self.xml = _xml(config)
        if self.xml is not None:
            manager.unregister(self.xml)  # the pytest process writes this test's XML from its reports
            self._reporters_before = len(self.xml.node_reporters_ordered)
            self._properties_before = len(self.xml.global_properties)

    def send_junit_extras(self) -> None:
        """Attributes and suite properties the test recorded (call before its teardown report)."""
        if self.xml is None:
            return
        attributes = [[name, value] for reporter in self.xml.node_reporters_ordered[self._reporters_before:]
                      for name, value in reporter.attrs.items()]
        properties = [list(p) for p in self.xml.global_properties[self._properties_before:]]
        if attributes or properties:
            send(self.channel, Junit(attributes, properties))


# -- in the pytest process --------------------------------------------------------

def show_terminal_text(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write(text, flush=True)


def add_junit_extras(config: pytest.Config, report: pytest.TestReport, extras: Junit) -> None:
    """Before the teardown report is logged: what record_xml_attribute and record_testsuite_property recorded."""
    xml = _xml(config)
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
    from ..errors import NpuLazyWarning

    category = category or NpuLazyWarning
    for message in compat.filter_warning(config, category(plain(text)), filename):
        record_warning(config, message, nodeid=nodeid)

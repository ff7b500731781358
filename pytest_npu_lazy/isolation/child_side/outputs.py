"""What an isolated test writes besides its reports, on the child's side: terminal lines and JUnit XML extras.

In-process, live logs (``log_cli``), ``--setup-show`` lines and anything else
written through the terminal writer appear while the test runs, and
``record_xml_attribute`` / ``record_testsuite_property`` write into the JUnit
XML object of the pytest process. A child has copies of both, which nobody
reads. So the child's terminal writer sends what it is given home as
``terminal`` messages, and the JUnit extras travel as one ``junit`` message
before the teardown report; the pytest process writes both where its own
would have gone (:mod:`pytest_npu_lazy.isolation.pytest_side.outputs`).
Progress lines and results are not sent: the pytest process prints those
from the reports, as for any test.

The pytest internals this needs (the JUnit XML object, the terminal
reporter's writer) are reached through ``pytest_npu_lazy.compat``.
"""

from __future__ import annotations

from typing import Any

import pytest

from ... import compat
from ...forks.channel import send
from ..messages import Junit, Terminal


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
        self.xml = compat.junit_xml(config)
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

"""The pytest-process side of an isolated test: hand it to a child, relay what comes back.

Reports arrive serialised by pytest itself and are logged through
``pytest_runtest_logreport``, so the terminal, junitxml and xdist see
ordinary reports. When the child dies, hangs or cannot start, this module
writes the missing reports itself, so every test ends with a full set.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from typing import Any, Literal, Protocol

import pytest
from pytest import TestReport

from ... import compat
from ...errors import MarkerError, NpuLazyError
from ...forks.channel import Accepts, Channel, ChannelClosed, ProtocolError, describe_status, send
from ...forks.processes import kill_group
from ...probe.summary import ERROR_ATTRIBUTE
from ...settings import Resolver, TestSettings
from .. import messages
from .outputs import add_junit_extras, record_warning, record_warning_text, show_terminal_text
from .progress import RUNNER_PHASE_OF, PhaseProgress
from .skip_marks import skipped_by_mark

#: How long a child may take to report its exit status after its socket closed.
EXIT_STATUS_TIMEOUT = 10.0
#: How long a hanging child gets to write its stack dump before it is killed.
DUMP_GRACE = 1.0
#: How many of an xdist worker's queued tests the launcher hears of ahead (the module zygotes start within 20)
PLAN_AHEAD = 40


class Child(Protocol):
    """What the controller needs of a forked or spawned child."""

    channel: Channel

    @property
    def pid(self) -> int: ...

    @property
    def pgid(self) -> int: ...

    def exit_status(self, timeout: float = ...) -> int | None: ...

    def lost_parent(self) -> str | None: ...

    def close(self) -> None: ...


class Launcher(Protocol):
    """Where children come from: the fork pool (:mod:`.pool`) or spawn (:mod:`.spawn`)."""

    def child(self, item: pytest.Item, settings: TestSettings) -> Child:
        """A child that has been sent ``item``'s :class:`~.messages.Prepare` (and may be collecting it)."""

    def prepare(self, item: pytest.Item, settings: TestSettings) -> None:
        """A hint that ``item`` runs next: a launcher may start preparing a child for it now."""

    def plan(self, upcoming: list[tuple[pytest.Item, TestSettings]]) -> None:
        """The isolated tests this process will run from now on, as far as it knows them, the running one first:
        under pytest-xdist, whose workers learn their tests a batch at a time, the launcher hears them here."""

    def release(self, item: pytest.Item, settings: TestSettings) -> None:
        """``item``'s child is done with, whatever its end: what was kept for it may go."""

    def keep(self, item: pytest.Item, settings: TestSettings, child: Child) -> None:
        """``item`` passed in ``child``, which waits for the next ``share_process`` test of its module: the
        launcher hands it that test, or closes it."""


class IsolationController:
    """Registered as a plugin in pytest_configure, so its hook runs before pytest-forked's."""

    def __init__(self, config: pytest.Config, resolver: Resolver, launchers: dict[str, Launcher],
                 worker: bool = False) -> None:
        """``worker``: this process is a pytest-xdist worker (:meth:`_plan_ahead`)."""
        self.config = config
        self.resolver = resolver
        self.launchers = launchers
        self.worker = worker

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        try:
            settings = self.resolver.for_item(item)
        except MarkerError as exc:
            self._log_start(item)
            self._log_all(item, synthesized(item, "setup", str(exc), error=True))
            self._log_finish(item)
            return True
        if not settings.isolated or skipped_by_mark(item):  # a skip mark skips in-process, before any fixture
            return None
        self._log_start(item)
        try:
            ChildRun(self.config, item, settings, self.launchers[settings.isolation]).run(
                lambda: self._prepare_next(item, settings, nextitem))
        finally:
            self.launchers[settings.isolation].release(item, settings)
            compat.teardown_exact(item, nextitem)
            self._log_finish(item)
        return True

    def _prepare_next(self, item: pytest.Item, settings: TestSettings, nextitem: pytest.Item | None) -> None:
        """Start collecting the next test in a spare child while this one runs; under pytest-xdist, first tell
        the launcher what else this worker was sent (:meth:`_plan_ahead`)."""
        self._plan_ahead(item, settings, nextitem)
        if nextitem is None:
            return
        try:
            next_settings = self.resolver.for_item(nextitem)
        except MarkerError:
            return
        if next_settings.isolated:
            self.launchers[next_settings.isolation].prepare(nextitem, next_settings)

    def _plan_ahead(self, item: pytest.Item, settings: TestSettings, nextitem: pytest.Item | None) -> None:
        """An xdist worker knows its tests only as its controller sends them: the ones queued now (running one,
        next one, then its queue, up to :data:`PLAN_AHEAD` of them) go to the launcher, which starts the next
        modules' zygotes while this module's tests run, as it does where a process knows all its tests."""
        queued = compat.xdist_queued_items(self.config) if self.worker else None
        if queued is None:
            return
        upcoming = [(item, settings)]
        for other in ([nextitem] if nextitem is not None else []) + queued[:PLAN_AHEAD]:
            try:
                other_settings = self.resolver.for_item(other)
            except MarkerError:
                continue
            if other_settings.isolated and other_settings.isolation == settings.isolation:
                upcoming.append((other, other_settings))
        self.launchers[settings.isolation].plan(upcoming)

    def _isolated(self, item: pytest.Item) -> bool:
        try:
            return self.resolver.for_item(item).isolated
        except MarkerError:
            return False

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        """pytest-timeout times an isolated test inside its child; a timer here would fire into this loop."""
        return True if self._isolated(item) else None

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool | None:
        return True if self._isolated(item) else None

    @staticmethod
    def _log_start(item: pytest.Item) -> None:
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)

    @staticmethod
    def _log_finish(item: pytest.Item) -> None:
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    @staticmethod
    def _log_all(item: pytest.Item, reports: list[TestReport]) -> None:
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)


class ChildRun:
    """Drives one child from 'run' to 'finished', or writes the reports it could not."""

    def __init__(self, config: pytest.Config, item: pytest.Item, settings: TestSettings, launcher: Launcher) -> None:
        self.config = config
        self.item = item
        self.settings = settings
        self.launcher = launcher
        self.phases_reported: dict[str, str] = {}
        self.progress = PhaseProgress()
        self.files: dict[str, int] = {}
        self.child: Child | None = None
        self.internal_error: str | None = None  # a traceback of pytest-npu-lazy's own code in the child
        self.junit_extras: messages.Junit | None = None  # logged with the teardown report
        self.kept = False  # the child passed the test and waits for the next of its module (share_process)

    @property
    def running(self) -> Child:
        """The child :meth:`run` started: the relay and its handlers run only once there is one."""
        assert self.child is not None
        return self.child

    def run(self, prepare_next=lambda: None) -> None:
        try:
            self.child = self.launcher.child(self.item, self.settings)
        except NpuLazyError as exc:
            self._finish_with(f"npu_lazy: cannot start an isolated child: {exc}", error=True)
            return
        try:
            try:
                send(self.child.channel, messages.RunTest(self.item.nodeid))
            except OSError:
                pass  # it died while collecting: what it sent, and its exit status, say how (read below)
            prepare_next()
            self._relay()
        except BaseException:
            self.kept = False
            kill_group(self.child.pgid, signal.SIGKILL)
            raise
        finally:
            for fd in self.files.values():
                os.close(fd)
            if self.kept:  # the child says so only after all three reports passed (TestRun.keepable)
                self.launcher.keep(self.item, self.settings, self.child)
            else:
                self.child.close()

    def _relay(self) -> None:
        deadline = None if self.settings.timeout is None else time.monotonic() + self.settings.timeout
        channel = self.running.channel
        accepts = Accepts.handled_by(self, *messages.FROM_CHILD)
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                self._timed_out()
                return
            try:
                message, fds = accepts.receive(channel, remaining)
            except ProtocolError as exc:
                kill_group(self.running.pgid, signal.SIGKILL)
                self.internal_error = (self.internal_error or "") + f"the pytest process could not read the child: {exc}\n"
                self._crashed()
                return
            except ChannelClosed:
                self._crashed()
                return
            if message is None:
                continue
            if Accepts.dispatch(self, message, fds):
                return

    # -- the child's messages, one handler each (the accepted set is derived from them); True at the last --

    def on_report(self, message: messages.Report, fds) -> None:
        self._log(report_from_data(self.config, message.data))

    def on_phase(self, message: messages.Phase, fds) -> None:
        self.progress.update(message)

    def on_warning(self, message: messages.WarningRecorded, fds) -> None:
        record_warning(self.config, deserialize_warning(message.warning), nodeid=message.nodeid,
                       when=message.when, location=tuple(message.location) if message.location else None)

    def on_terminal(self, message: messages.Terminal, fds) -> None:
        show_terminal_text(self.config, message.text)

    def on_junit(self, message: messages.Junit, fds) -> None:
        self.junit_extras = message

    def on_files(self, message: messages.Files, fds: list[int]) -> None:
        self.files = dict(zip(message.names, fds))

    def on_not_run(self, message: messages.NotRun, fds) -> None:
        self._finish_with(message.text, error=message.error)

    def on_interrupted(self, message: messages.Interrupted, fds) -> None:
        self._interrupt(message)

    def on_internal_error(self, message: messages.InternalError, fds) -> None:
        self.internal_error = message.text

    def on_finished(self, message: messages.Finished, fds) -> bool:
        self.kept = message.kept
        return True

    def _log(self, report: TestReport) -> None:
        self.phases_reported[report.when] = report.outcome
        if report.when == "teardown" and self.junit_extras is not None:
            add_junit_extras(self.config, report, self.junit_extras)
        self.item.ihook.pytest_runtest_logreport(report=report)

    def _interrupt(self, message: messages.Interrupted) -> None:
        self.running.channel.close()
        if message.exception == "Exit":
            pytest.exit(message.message, returncode=message.returncode)
        raise KeyboardInterrupt(message.message)

    def _crashed(self) -> None:
        status = self.running.exit_status(EXIT_STATUS_TIMEOUT)
        how = describe_status(status)
        if self.internal_error:
            self._finish_with(f"the isolated child (pid {self.running.pid}) ended with {how}", error=True)
            return
        lost = self.running.lost_parent()
        if lost:
            self._finish_with(lost, error=True)  # shown as ERROR already: no prefix
            return
        if status is not None and os.WIFEXITED(status):
            text = f"CRASHED: the isolated child (pid {self.running.pid}) ended with {how} before it finished reporting"
        else:
            text = f"CRASHED with {how}: the isolated child (pid {self.running.pid}) died before it finished reporting"
        self._finish_with(text, error=False)

    def _timed_out(self) -> None:
        pid = self.running.pid
        os.kill(pid, signal.SIGUSR1)  # faulthandler in the child writes every thread's stack
        deadline = time.monotonic() + DUMP_GRACE
        while time.monotonic() < deadline and self._file_size("stacks") == 0:
            time.sleep(0.01)
        kill_group(self.running.pgid, signal.SIGKILL)
        self.running.exit_status(EXIT_STATUS_TIMEOUT)
        text = (f"TIMEOUT: the isolated test ran longer than {self.settings.timeout:g} s and was killed with its "
                f"process group (pid {pid}).")
        self._finish_with(text, error=False)

    def _file_size(self, name: str) -> int:
        fd = self.files.get(name)
        return os.fstat(fd).st_size if fd is not None else 0

    def _read_file(self, name: str) -> str:
        fd = self.files.get(name)
        if fd is None:
            return ""
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0).decode("utf-8", "replace") if size else ""

    def _finish_with(self, text: str, error: bool) -> None:
        """Write the reports the child did not: the phase that broke, then a teardown."""
        reported = self.phases_reported
        when: Literal["setup", "call", "teardown"]
        if "setup" not in reported:
            when = "setup"
        elif reported["setup"] == "passed" and "call" not in reported:
            when = "call"
        else:
            when = "teardown"
        if self.internal_error:
            text += "\n\npytest-npu-lazy failed inside the child (please report this):\n" + self.internal_error
        stacks = self._read_file("stacks")
        if stacks:
            text += "\n\nPython stacks of the child when it ended (most recent call first):\n" + trim_stacks(stacks)
        sections = [(f"Captured {name} {when}", content) for name in ("stdout", "stderr")
                    if (content := self._read_file(name))]
        if "teardown" in reported:
            # every report is in; what broke came after them, so it becomes a warning
            record_warning_text(self.config, f"{self.item.nodeid}: {text}", nodeid=self.item.nodeid,
                                category=pytest.PytestWarning)
            return
        reports = synthesized(self.item, when, text, error=error, sections=sections)
        reports[0].duration = self.progress.elapsed(RUNNER_PHASE_OF[when])
        if self.progress.phases:  # how far it got, for the summary, JSON and HTML
            reports[-1].npu_lazy = self.progress.summary(self.settings).to_dict()  # type: ignore[attr-defined]
        for report in reports:
            self._log(report)


_HARNESS_FRAMES = ("/_pytest/", "/pluggy/", "/pytest_npu_lazy/", "<frozen runpy>", "/pytest/__main__.py")


def trim_stacks(dump: str) -> str:
    """faulthandler's dump without the frames of pytest and of this plugin, which say nothing about the test."""
    kept, omitted = [], 0
    for line in dump.splitlines():
        if line.lstrip().startswith("File ") and any(part in line for part in _HARNESS_FRAMES):
            omitted += 1
            continue
        if omitted and not line.lstrip().startswith("File "):
            kept.append(f"  ... {omitted} frames of pytest and pytest-npu-lazy omitted")
            omitted = 0
        kept.append(line)
    if omitted:
        kept.append(f"  ... {omitted} frames of pytest and pytest-npu-lazy omitted")
    return "\n".join(kept) + "\n"


def synthesized(item: pytest.Item, when: Literal["setup", "call", "teardown"], text: str, error: bool,
                sections: list[tuple[str, str]] | None = None) -> list[TestReport]:
    """A failed report for ``when`` plus the teardown report pytest would have written after it."""
    failed = TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed", text, when,
                        sections=sections or [], user_properties=list(item.user_properties))
    setattr(failed, ERROR_ATTRIBUTE, error)
    reports = [failed]
    if when != "teardown":
        reports.append(TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, "passed",
                                  None, "teardown", user_properties=list(item.user_properties)))
    return reports


def deserialize_warning(data: dict[str, Any]) -> warnings.WarningMessage:
    """Rebuild a warning without importing the module that defined its class (it may be torch)."""
    category: type[Warning] = UserWarning
    for module_name, class_name in data["category"]:
        module = sys.modules.get(module_name)
        found = getattr(module, class_name, None) if module is not None else None
        if isinstance(found, type) and issubclass(found, Warning):
            category = found
            break
    if (data["category"] and category.__name__ != data["category"][0][1]):
        category = type(data["category"][0][1], (category,), {"__module__": data["category"][0][0]})
    return warnings.WarningMessage(category(data["message"]), category, data["filename"], data["lineno"])


def report_from_data(config, data: dict[str, Any]):
    """pytest's own deserialisation, after restoring the tuples JSON turned into lists."""
    if isinstance(data.get("longrepr"), list):
        data["longrepr"] = tuple(data["longrepr"])  # a skip: (path, lineno, reason)
    if isinstance(data.get("location"), list):
        data["location"] = tuple(data["location"])
    data["sections"] = [tuple(section) for section in data.get("sections", [])]
    data["user_properties"] = [tuple(prop) for prop in data.get("user_properties", [])]
    return config.hook.pytest_report_from_serializable(config=config, data=data)

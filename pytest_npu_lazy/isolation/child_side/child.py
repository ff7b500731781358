"""The test child: collect one node, run pytest's own protocol, stream every report home.

A forked child starts from a zygote's memory (the pytest session as it was
before collection, plus the preload); a spawned child is a fresh pytest
process. Both run the test through ``pytest_runtest_protocol``, so fixtures,
capture, warnings and every other plugin's hooks behave as they do without
isolation, and both send each report the moment it exists, so a crash
still leaves "setup passed" and the output so far.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import warnings
from typing import Any

import pytest

from ... import role
from ...cann.compute.host_kernels import lost_reason
from ...errors import NpuLazyError
from ...forks.channel import Channel, ChannelClosed, ProtocolError, send
from ...forks.processes import set_title
from ...probe import inductor_cache, state as probe
from ...probe.device_calls import DEVICE_CALLS
from ...probe.recorder import RECORDER
from ...probe.summary import SUMMARY_ATTRIBUTE
from ...settings import TestSettings
from .. import messages
from ..preload import import_preload
from ..target import Target, TargetError
from .find import collect_target, identify, not_collected, resolve_exactly
from .headroom import with_headroom
from .inherit import adopt_basetemp, private_capture, reset_signals, save_coverage
from .outputs import ChildOutputs

#: names of the files a child hands to the pytest process, in this order
FILE_NAMES = ("stacks", "stdout", "stderr")
#: the relay's name among pytest's plugins (a test may look it up)
RELAY_NAME = "npu_lazy_child_relay"


class CollectionObserver:
    """What collecting said besides its items: failed collectors and what a hook deselected."""

    def __init__(self) -> None:
        self.collect_failures: list[pytest.CollectReport] = []
        self.deselected: list[pytest.Item] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_failures.append(report)

    def pytest_deselected(self, items) -> None:
        """The pytest process already chose to run this test; a filter here must not undo that."""
        self.deselected.extend(items)


class ChildRelay(CollectionObserver):
    """Plugin registered in the child: forwards reports and warnings as they happen."""

    def __init__(self, channel: Channel | None, config: pytest.Config, outputs: ChildOutputs) -> None:
        super().__init__()
        self.channel = channel  # None in a module zygote, which registers the relay for its children
        self.config = config
        self.outputs = outputs
        self.state: probe.ProbeState | None = None  # known once the child is given its test
        self.outcomes: list[str] = []  # of the current test's reports: a child is kept only after a clean pass
        self.files: tuple[list[str], list[int]] = ([], [])  # what Files sends: again for each test of a kept child

    def bind(self, channel: Channel) -> None:
        """The child's own channel, for a relay its module zygote registered before forking it."""
        self.channel = self.outputs.channel = channel

    @property
    def bound(self) -> Channel:
        """The channel of a child: bound before its test, so before any hook about the test runs."""
        assert self.channel is not None, "a relay's test hooks run in a child, after bind()"
        return self.channel

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> None:
        """A phase's code (the test's, its fixtures') is done: until the next phase starts only pytest's
        reporting runs, so what the child says meanwhile (the report, phase ends, warnings) is held and
        sent in one write, one wake-up of the pytest process instead of one a message."""
        self.bound.hold()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.outputs.send_junit_extras()
            if self.state is not None:
                self.state.finish()
                setattr(report, SUMMARY_ATTRIBUTE, self.state.summary().to_dict())
        self.outcomes.append(report.outcome)
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        send(self.bound, messages.Report(data))

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str,
                                nodeid: str, location: Any) -> None:
        self.send_warning(warning_message, when, nodeid, location)

    def send_warning(self, warning_message: warnings.WarningMessage, when: str = "runtest",
                     nodeid: str = "", location: Any = None) -> None:
        if self.channel is None:  # a module zygote's: what its collection raised, its WarningKeeper keeps
            return
        send(self.channel, messages.WarningRecorded(serialize_warning(warning_message), when, nodeid, location))


def serialize_warning(message: warnings.WarningMessage) -> dict:
    category = message.category or UserWarning
    return {
        "message": str(message.message),
        "category": [(klass.__module__, klass.__name__) for klass in category.__mro__
                     if issubclass(klass, Warning)],
        "filename": message.filename,
        "lineno": message.lineno,
    }


def leave_pytest_roles(config: pytest.Config) -> None:
    """The child runs one test: it neither talks to xdist's controller nor isolates or forks it again."""
    for plugin in list(config.pluginmanager.get_plugins()):
        if type(plugin).__name__ == "WorkerInteractor":  # pytest-xdist's link to its controller
            config.pluginmanager.unregister(plugin)
    controller = config.pluginmanager.get_plugin("npu_lazy_controller")
    if controller is not None:  # this child runs the test itself
        config.pluginmanager.unregister(controller)
    if hasattr(config.option, "forked"):
        config.option.forked = False  # pytest-forked would fork this clean child again


def register_relay(config: pytest.Config) -> ChildRelay:
    """Make this process a test child's in everything but its channel: out of pytest's other roles, the relay
    registered. A module zygote does it once for all its children, which then only bind their channel:
    registering a plugin is the costliest step of a child's set-up, and it is the same for every child."""
    leave_pytest_roles(config)
    role.become_isolated_child(config)  # the reports are the pytest process's, not this child's
    relay = ChildRelay(None, config, ChildOutputs(None, config))
    config.pluginmanager.register(relay, RELAY_NAME)
    return relay


def become_test_process(channel: Channel, config: pytest.Config) -> ChildRelay:
    """Everything a child does before it knows its test: a spare child does it while it waits.

    It sends its terminal output and JUnit extras home instead of writing
    them, sends the files a crash report reads (the stack dump, its own
    capture files) and starts relaying reports.
    """
    relay = config.pluginmanager.get_plugin(RELAY_NAME)
    if relay is None:
        relay = register_relay(config)
    relay.bind(channel)
    stacks = unnamed_file()  # kept open as long as the process lives
    faulthandler.enable(stacks, all_threads=True)
    faulthandler.register(signal.SIGUSR1, stacks, all_threads=True)
    fds = [stacks, *private_capture(config)]
    relay.files = ([name for name, fd in zip(FILE_NAMES, fds) if fd >= 0], [fd for fd in fds if fd >= 0])
    send_files(relay)
    return relay


def send_files(relay: ChildRelay) -> None:
    """Hand the pytest process the files its crash report reads: at the start, and again for each next test of a
    kept child (whose stack dump starts empty again; pytest empties its capture files at every phase itself)."""
    names, fds = relay.files
    if names and names[0] == "stacks":
        os.ftruncate(fds[0], 0)
    send(relay.bound, messages.Files(names), fds=fds)


def unnamed_file() -> int:
    """A descriptor of a new file without a name, in the temporary directory: one ``open`` where the
    filesystem has O_TMPFILE (every child pays for this file, and ``tempfile`` costs a hundred times more)."""
    directory = tempfile.gettempdir()
    try:
        return os.open(directory, os.O_RDWR | os.O_TMPFILE, 0o600)
    except (AttributeError, OSError):  # not Linux, or a filesystem without O_TMPFILE
        fd, path = tempfile.mkstemp(dir=directory)
        os.unlink(path)
        return fd


def apply_marker(state: probe.ProbeState, settings: TestSettings) -> str | None:
    """The marker's blocks and tracking, before the test module is imported; why not, when they cannot be."""
    try:
        state.blocker.block(*settings.block)
        for target in settings.track:
            state.tracker.track(target)
    except NpuLazyError as exc:
        return f"npu_lazy marker: {exc}"
    return None


def collect_in_phase(state: probe.ProbeState, settings: TestSettings, session: pytest.Session,
                     target: Target) -> tuple[list[pytest.Item], str | None]:
    """The collect phase of a test child or a module zygote: the marker, then pytest's collection of ``target``.

    Returns the items and, when the test cannot run, why (the text of its error report).
    """
    state.runner_phase("collect")
    items: list[pytest.Item] = []
    problem = apply_marker(state, settings)
    if problem is None:
        try:
            items = collect_target(session, target)
        except TargetError as exc:
            problem = f"npu_lazy: {exc}"
    state.end_runner_phase()
    return items, problem


class TestRun:
    """One isolated test inside the child process."""

    def __init__(self, relay: ChildRelay, settings: TestSettings, target: Target,
                 state: probe.ProbeState | None = None, earlier: int = 0) -> None:
        """``state``: the one a module zygote made when it collected the module (its collect phase and
        imports become this test's own, as they were made for it); None makes a new one. ``earlier``: the
        tests this child ran before this one (``share_process``), which its report names."""
        self.relay = relay
        self.channel = relay.bound  # become_test_process bound it
        self.config = relay.config
        self.settings = settings
        self.target = target
        self.nodeid = nodeid = target.nodeid
        adopt_basetemp(self.config, target.basetemp)
        inductor_cache.apply(settings.inductor_cache, settings.inductor_cache_dir)
        self.state = probe.ProbeState.for_settings(settings, nodeid) if state is None else state.adopt(settings, nodeid)
        if earlier:  # what it loads is what the earlier tests had not: the report says so where it names the baseline
            self.state.baseline_label += (f"; its process ran {earlier} earlier test{'s' if earlier > 1 else ''} of "
                                          "its module first (share_process)")
        relay.outcomes = []
        self.state.listener = self._send_phase
        self.state.replay_phases()  # a module zygote's collect phase, told to the pytest process now
        set_title("child", nodeid)
        probe.set_active_state(self.state)
        relay.state = self.state
        self.item: pytest.Item | None = None
        self.collected = False

    def _send_phase(self, phase: dict) -> None:
        """A phase began or ended. A start goes out at once, with everything held since the last phase's
        code ended (:meth:`ChildRelay.pytest_runtest_makereport`): the test's own code runs next, and a
        crash, a hang or a kill there still shows everything before it."""
        send(self.channel, messages.Phase(**phase))
        if phase["duration"] is None:
            self.channel.release()

    def prepare(self) -> bool:
        """Apply the marker's blocks and tracking; False if the test cannot run."""
        self.state.runner_phase("collect")
        problem = apply_marker(self.state, self.settings)
        if problem is not None:
            self.not_run(problem, error=True)
            return False
        return True

    def collect(self, session: pytest.Session) -> None:
        """Prepare and collect the test: in a spare child, while the previous test still runs."""
        items, problem = collect_in_phase(self.state, self.settings, session, self.target)
        if problem is not None:
            self.not_run(problem, error=True)
            return
        try:
            self.find(items)
        except TargetError as exc:
            self.not_run(f"npu_lazy: {exc}", error=True)

    def find(self, items: list[pytest.Item], index: dict[str, pytest.Item] | None = None) -> None:
        """Take the target from what the child collected, deselected ones included: the pytest process
        already chose to run it, and a filter here must not undo that. Say why when it is not there.
        ``index``: those items by node id, where a module zygote built it once for all its children."""
        self.collected = True
        deselected = self.relay.deselected  # usually none: then the items are not copied (a copy touches each)
        self.item = identify(self.target, [*items, *deselected] if deselected else items, index)

    def execute(self) -> None:
        if not self.collected:
            return  # prepare() or collect() already said why the test cannot run
        if self.item is None:
            text = "\n\n".join(str(r.longrepr) for r in self.relay.collect_failures) or (
                f"the isolated child collected no test named {self.nodeid!r}: a collection hook "
                "deselected it there, or the test module defines tests differently on each import.")
            self.not_run(text, error=True)
            return
        item = self.item
        self.relay.outputs.sending = True
        try:
            # with headroom on the frame stack: a hot loop on one of its chunk boundaries runs many times slower
            with_headroom(lambda: item.ihook.pytest_runtest_protocol(item=item, nextitem=None))
        finally:
            self.relay.outputs.sending = False

    def keepable(self) -> bool:
        """Whether this child may run the next test of its module: the marker's ``share_process``, every report
        of this test passed (a failure, an xfail or a skip may leave state behind), and the device, where the
        emulation runs, not lost."""
        return (self.settings.share_process and self.item is not None and len(self.relay.outcomes) == 3
                and all(outcome == "passed" for outcome in self.relay.outcomes) and not device_lost())

    def finish(self, kept: bool = False) -> None:
        """Save what must outlive the child, then tell the pytest process it may go on (``kept``: and that this
        child waits for the next test of its module)."""
        problem = save_coverage()
        if problem:
            self.relay.send_warning(warnings.WarningMessage(pytest.PytestWarning(problem), pytest.PytestWarning,
                                                            "", 0), nodeid=self.nodeid)
        self._send_now(messages.Finished(kept))

    def _send_now(self, message) -> None:
        """A last word: sent with everything held before it, since the child may end right after."""
        send(self.channel, message)
        self.channel.release()

    def not_run(self, text: str, error: bool) -> None:
        self._send_now(messages.NotRun(text, error))
        self.collected = False

    def guarded(self, body) -> bool:
        """Run ``body``; turn Ctrl-C and pytest.exit() into messages the pytest process re-raises.

        Returns False when the test must not go on.
        """
        try:
            body()
        except KeyboardInterrupt as exc:
            self._send_now(messages.Interrupted("KeyboardInterrupt", str(exc), None))
        except pytest.exit.Exception as exc:
            self._send_now(messages.Interrupted("Exit", exc.msg, exc.returncode))
        except BaseException:
            import traceback

            self._send_now(messages.InternalError(traceback.format_exc()))
            raise
        else:
            return True
        return False


def receive_prepare(channel: Channel) -> tuple[TestSettings, Target]:
    """A child's first message: always Prepare (the launcher contract), or a ProtocolError; its test's
    settings and target, read back once here for every kind of child."""
    message, _ = messages.CHILD_ACCEPTS.receive(channel)
    if not isinstance(message, messages.Prepare):
        raise ProtocolError(f"a test child's first message must be {messages.Prepare.KIND!r}, not {message.KIND!r}")
    return TestSettings.from_dict(message.settings), Target.from_dict(message.target)


def receive_run(channel: Channel, nodeid: str) -> None:
    """Wait for the word to run the prepared test, or a ProtocolError if it names another."""
    message, _ = messages.CHILD_ACCEPTS.receive(channel)
    if not isinstance(message, messages.RunTest) or message.nodeid != nodeid:
        raise ProtocolError(f"a test child prepared for {nodeid!r} was sent {message!r}")


def serve_child(channel: Channel, session: pytest.Session) -> None:
    """Entry point of a forked child: take a test, collect it, run it when told, report, exit.

    A spare child usually gets Prepare while the test before it still runs,
    so its collection is off the critical path; RunTest then starts the
    protocol at once.
    """
    relay = become_forked_child(channel, session.config)

    def ready(settings: TestSettings, target: Target, earlier: int) -> tuple[TestRun, bool]:
        run = TestRun(relay, settings, target)
        return run, run.guarded(lambda: run.collect(session))

    serve_test(channel, ready)


def become_forked_child(channel: Channel, config: pytest.Config) -> ChildRelay:
    """A fresh fork of a zygote becomes a spare test child: signals as in pytest, a title, a relay."""
    reset_signals()
    set_title("child", "spare, waiting for its test")
    RECORDER.reset_after_fork()
    return become_test_process(channel, config)


def serve_test(channel: Channel, ready, shareable: bool = False) -> None:
    """A forked child's life once it is one: Prepare, ``ready(settings, target, earlier)`` -> (run, go on?), RunTest,
    run, report.

    A spare child usually gets Prepare while the test before it still runs,
    so readying is off the critical path; RunTest then starts at once.
    ``shareable`` (a child of a module zygote): after a clean pass of a
    ``share_process`` test it stays, for the next such test of its module,
    until the pytest process closes its channel.
    """
    earlier = 0
    while True:
        try:
            run, go_on = ready(*receive_prepare(channel), earlier)
            if go_on:
                DEVICE_CALLS.sample_lines_once_needed()  # while it waits: a leaf process, no fork follows its thread
            receive_run(channel, run.nodeid)
        except ProtocolError as exc:
            print(f"pytest-npu-lazy: a test child ends: {exc}", file=sys.stderr)
            return
        except ChannelClosed:
            return  # a spare child that was never needed, or a kept one whose module has no next such test
        if go_on:
            go_on = run.guarded(run.execute)
        kept = shareable and go_on and run.keepable()
        run.finish(kept)
        sys.stdout.flush()
        sys.stderr.flush()
        if not kept:
            return
        earlier += 1
        try:
            send_files(run.relay)
        except OSError:
            return


def device_lost() -> bool:
    """Whether the emulated NPU of this process is lost (a refused call): nothing may run on it after that.
    False without the emulation, and on a real NPU (a test that breaks one fails, and its child is not kept)."""
    return bool(lost_reason())


class SpawnedSession:
    """Plugin of a spawned child: a whole pytest process that runs one test for its parent.

    It receives the test at session start, imports the preload baseline, and
    replaces the run-test loop with the one isolated test, ending the process
    before session finish so it writes no cache, junit or other files.
    """

    def __init__(self, config: pytest.Config, fd: int) -> None:
        import socket

        self.config = config
        self.channel = Channel(socket.socket(fileno=fd))
        self.run: TestRun  # from session start on, which every other hook of this plugin follows
        reset_signals()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        settings, target = receive_prepare(self.channel)  # a ProtocolError ends this process: its parent reports it
        failure, _ = import_preload(settings.baseline.preload, self.config, capture=False)
        self.run = TestRun(become_test_process(self.channel, self.config), settings, target)
        if failure is not None:
            self.run.not_run(f"npu_lazy: {settings.baseline.label} could not be prepared: {failure}", error=True)
            self._exit()
        if self.run.prepare():
            resolve_exactly(target)  # for the collection pytest is about to do; this process ends after it
        else:
            self._exit()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection(self, session: pytest.Session):
        try:
            return (yield)
        except pytest.UsageError as exc:  # pytest would print it and exit 4: the test gets it instead
            self.run.not_run(f"npu_lazy: {not_collected(self.run.target, exc)}", error=True)
            self._exit()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        run = self.run
        try:
            run.find(session.items)
        except TargetError as exc:
            run.not_run(f"npu_lazy: {exc}", error=True)
        receive_run(self.channel, run.nodeid)
        DEVICE_CALLS.sample_lines_once_needed()  # a spawned child forks nothing either
        run.guarded(run.execute)
        self._exit()
        return True  # pragma: no cover - _exit does not return

    def _exit(self) -> None:
        self.run.finish()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

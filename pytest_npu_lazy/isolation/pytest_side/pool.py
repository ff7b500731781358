"""The pytest process's zygotes: start them, hand out their children, restart them, stop them.

The servers themselves run in forks (:mod:`..zygote_side.server`); this is the other end
of their channels, as pytest-xdist keeps ``workermanage.py`` apart from
``remote.py``. A launcher (the controller's word) gives a child that has
already been sent its :class:`~.messages.Prepare`: the fork pool asks a
zygote for a spare child and sends it, ahead of time where it can, so a
test usually waits only for a message.

The next child is forked while the current test runs, so a test waits only
for a socket message, not for a fork.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from ...errors import ZygoteError
from ...forks.channel import Accepts, Channel, ChannelClosed, ProtocolError, describe_status, send
from ...forks.processes import wait_or_kill
from ...forks.server import READY_TIMEOUT, run_forked
from ...settings import Baseline
from .. import messages
from ..target import prepare_message
from ..zygote_side.server import serve_root
from .module_zygotes import ModuleKey, ModuleZygotes, module_key, module_target
from .outputs import record_warning_text

FORK_TIMEOUT = 60.0


@dataclass
class ChildHandle:
    """A forked test child as the pytest process sees it."""

    pid: int
    channel: Channel
    zygote: "ZygoteHandle"
    started: float = field(default_factory=time.monotonic)

    @property
    def pgid(self) -> int:
        return self.pid

    def exit_status(self, timeout: float = 10.0) -> int | None:
        return self.zygote.exit_status(self.pid, timeout)

    def lost_parent(self) -> str | None:
        """Why the child died with its zygote, when it did."""
        process = self.zygote.process
        if not process.dead:
            return None
        status = process.death_status()
        return (f"the zygote (pid {process.pid}, {process.label}) died while this test ran, "
                f"with {describe_status(status)}; its children died with it. A new zygote serves the next tests.")

    def close(self) -> None:
        self.channel.close()


class ZygoteProcess:
    """One zygote process and the pytest process's end of its channel: what it is, whether it is alive.

    It exists so that the socket has one owner: sending to the zygote, reading
    its next message, and learning that it died (its channel closed, or said
    something that cannot be trusted) happen here only, and the pid and label
    that every message to a person names come from here. It knows nothing of
    what the messages mean: :meth:`receive` hands each to the endpoint's handler.
    """

    def __init__(self, baseline: Baseline, pid: int, channel: Channel, module_key: ModuleKey | None = None,
                 death_status: Callable[[], int | None] = lambda: None) -> None:
        self.baseline = baseline
        self.pid = pid
        self.channel = channel
        #: the module whose tests it collected (a module zygote, forked from its baseline's zygote); None: the
        #: baseline's own zygote. The pool asks this, not the label, which zygote it holds
        self.module_key = module_key
        #: asks its parent how this zygote ended; set by whoever started it
        self.death_status = death_status
        self.dead = False

    @property
    def label(self) -> str:
        """What it is, for messages to a person."""
        return self.module_key.describe() if self.module_key is not None else self.baseline.label

    def send(self, message) -> None:
        send(self.channel, message)

    def receive(self, endpoint, timeout: float | None):
        """Read one message within ``timeout`` and return what ``endpoint``'s handler for it returns (None when
        nothing came). A closed channel, or a ProtocolError (nothing it says can be trusted after that), marks
        it dead and raises ZygoteError."""
        try:
            message, fds = Accepts.handled_by(endpoint, *messages.FROM_ZYGOTE).receive(self.channel, timeout)
        except ChannelClosed as exc:
            self.dead = True
            why = f": {exc}" if isinstance(exc, ProtocolError) else ""
            raise ZygoteError(f"the zygote (pid {self.pid}, {self.label}) died{why}") from None
        return None if message is None else Accepts.dispatch(endpoint, message, fds)

    def close(self) -> None:
        """Tell it to shut down and close the channel; from now on it counts as dead."""
        self.dead = True
        try:
            send(self.channel, messages.Shutdown())
        except OSError:
            pass
        self.channel.close()


@dataclass
class ZygoteReadiness:
    """Whether the zygote has finished starting (its preload; a module zygote's collection too), and what that said.

    It exists apart from the process because a zygote is started ahead of the
    tests that need it: the pool asks whether it is ready, and whether it
    failed, many times before and after the one message that says so.
    """

    ready: bool = False
    #: why the zygote cannot serve its tests (its preload raised), from its TestZygoteReady
    error: str | None = None
    #: what it had to say to a person: its own warnings and its preload's output
    warnings: list[str] = field(default_factory=list)

    def record(self, message: messages.TestZygoteReady, preload) -> None:
        self.ready, self.error = True, message.error
        self.warnings = list(message.warnings)
        if message.output.strip():
            self.warnings.append(f"the zygote's preload {list(preload)} printed:\n" + message.output.rstrip())


class SpareChild:
    """The one child a zygote keeps forked ahead of the test that takes it, and the one request for it.

    It exists because forking ahead is how a test comes to wait for a message
    instead of a fork, and that takes two rules kept in one place: at most one
    ForkChild is outstanding and at most one child waits (a zygote never forks
    a second one nobody asked for), and a dead zygote is asked for nothing.
    """

    def __init__(self) -> None:
        self.child: ChildHandle | None = None
        self.requested = False

    def ask(self, process: ZygoteProcess) -> None:
        """Ask the zygote for a child unless one waits, one was asked for, or the zygote is dead."""
        if not self.requested and self.child is None and not process.dead:
            process.send(messages.ForkChild())
            self.requested = True

    def answered(self) -> None:
        """The zygote answered the request: it forked (the child comes to :meth:`keep`) or refused."""
        self.requested = False

    def keep(self, child: ChildHandle) -> None:
        self.child = child

    def take(self) -> ChildHandle | None:
        child, self.child = self.child, None
        return child

    def close(self) -> None:
        """Its zygote goes: a child waiting for a test goes with it."""
        if self.child is not None:
            self.child.close()
            self.child = None


class ZygoteRecords:
    """What the zygote said about processes it forked, kept until the wait that wants it collects it.

    It exists because those messages come whenever the channel is read, often
    while the pool waits for something else (a child's exit status arrives
    while the next child is being forked): a test child's exit status by pid,
    and a module zygote it started (its pid and channel) by key.
    """

    def __init__(self) -> None:
        self._exits: dict[int, int] = {}
        self._started: dict[str, tuple[int, int]] = {}

    def exited(self, pid: int, status: int) -> None:
        self._exits[pid] = status

    def has_exited(self, pid: int) -> bool:
        return pid in self._exits

    def exit_status(self, pid: int) -> int | None:
        """The child's wait status, taken (None when it was not reported)."""
        return self._exits.pop(pid, None)

    def zygote_started(self, key: str, pid: int, fd: int) -> None:
        self._started[key] = (pid, fd)

    def has_started(self, key: str) -> bool:
        return key in self._started

    def take_started(self, key: str) -> tuple[int, int]:
        """The module zygote's pid and its channel's descriptor, taken."""
        return self._started.pop(key)


class ZygoteHandle:
    """One zygote as the pool holds it: its process, its readiness, its spare child, its records.

    It exists because the zygote answers everything on one channel, in the
    order things happen: every wait (for readiness, a child, an exit status,
    a module zygote) reads whatever comes and routes each message to the part
    it concerns (one ``on_<kind>`` handler each), until the part it waits on
    has what it wants.
    """

    def __init__(self, process: ZygoteProcess) -> None:
        self.process = process
        self.readiness = ZygoteReadiness()
        self.spare = SpareChild()
        self.records = ZygoteRecords()

    # -- the zygote's messages, one handler each (the accepted set is derived from them) -------------------

    def on_ready(self, message: messages.TestZygoteReady, fds) -> None:
        self.readiness.record(message, self.process.baseline.preload)

    def on_child_exited(self, message: messages.ChildExited, fds) -> None:
        self.records.exited(message.pid, message.status)

    def on_zygote_started(self, message: messages.ZygoteStarted, fds: list[int]) -> None:
        self.records.zygote_started(message.key, message.pid, fds[0])

    def on_child_forked(self, message: messages.ChildForked, fds: list[int]) -> ChildHandle:
        self.spare.answered()
        return ChildHandle(message.pid, Channel(_socket_from_fd(fds[0])), self)

    def on_fork_refused(self, message: messages.ForkRefused, fds) -> None:
        self.spare.answered()
        raise ZygoteError(f"the zygote ({self.process.label}) refused to fork: {message.reason}")

    def _pump(self, timeout: float | None) -> ChildHandle | None:
        return self.process.receive(self, timeout)

    def poll(self) -> None:
        """Read one message it has sent, if any, without waiting: a zygote started ahead of its tests
        says TestZygoteReady while another module's tests run, and nobody waits on its channel then."""
        if not self.readiness.ready:
            self._pump(0)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.readiness.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZygoteError(f"the zygote ({self.process.label}) was not ready within {timeout:.0f} s")
            self._pump(remaining)

    def request_fork(self) -> None:
        self.spare.ask(self.process)

    def _pump_until(self, done: Callable[[], bool], doing: str) -> None:
        """Read this zygote's messages until ``done()``, or raise ZygoteError naming what it did not do in time."""
        deadline = time.monotonic() + FORK_TIMEOUT
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZygoteError(f"the zygote ({self.process.label}) did not {doing} within {FORK_TIMEOUT:.0f} s")
            child = self._pump(remaining)
            if child is not None:
                self.spare.keep(child)

    def take_child(self) -> ChildHandle:
        if self.spare.child is None:
            self.request_fork()
            self._pump_until(lambda: self.spare.child is not None, "fork")
        child = self.spare.take()
        self.request_fork()  # the next test's child is forked while this one runs
        return child

    def exit_status(self, pid: int, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while not self.records.has_exited(pid) and not self.process.dead:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                child = self._pump(remaining)
            except ZygoteError:
                return None
            if child is not None:
                self.spare.keep(child)
        return self.records.exit_status(pid)

    def start_module(self, start: messages.StartModuleZygote, key: ModuleKey) -> "ZygoteHandle":
        """Ask this zygote to fork ``key``'s module zygote; its handle (it may still be collecting)."""
        self.process.send(start)
        self._pump_until(lambda: self.records.has_started(start.key), f"start a {key.describe()}")
        pid, fd = self.records.take_started(start.key)
        return ZygoteHandle(ZygoteProcess(self.process.baseline, pid, Channel(_socket_from_fd(fd)), module_key=key,
                                          death_status=lambda: self.exit_status(pid, 5.0)))

    def close(self) -> None:
        self.spare.close()
        self.process.close()  # dead from here on: a child prepared from it is not handed out any more


def _socket_from_fd(fd: int) -> socket.socket:
    return socket.socket(fileno=fd)


class ZygotePool:
    """The pytest process's view of its zygotes: start, hand out children, restart, stop."""

    def __init__(self, session, module_zygotes: ModuleZygotes | None = None) -> None:
        self.session = session
        self.modules = module_zygotes or ModuleZygotes(0, 0, counting=False)
        self.root_pid: int | None = None
        self._root: Channel | None = None
        self._zygotes: dict[Baseline, ZygoteHandle] = {}
        self._zygote_exits: dict[int, int] = {}
        self._prepared: dict[str, ChildHandle] = {}  # node id -> a child already collecting it
        self.root_restarts = 0

    def start_root(self) -> None:
        """Fork the root now, while no test module has been imported yet."""
        ours, theirs = Channel.pair()
        pid = os.fork()
        if pid == 0:
            run_forked(lambda: serve_root(theirs, self.session), close=[ours])
        theirs.close()
        self.root_pid, self._root = pid, ours

    def warm(self, baselines) -> None:
        """Start zygotes for these baselines now, so their preloads overlap."""
        for baseline in baselines:
            self._zygote(baseline, wait=False)

    def _zygote(self, baseline: Baseline, wait: bool = True, timeout: float | None = None) -> ZygoteHandle:
        """The baseline's zygote, started if need be; with ``wait``, ready within ``timeout`` (the asking
        test's timeout: a preload that hangs, say ``import torch_npu`` stuck in a lock, fails that test with a
        report that says so, instead of holding the session for READY_TIMEOUT)."""
        zygote = self._zygotes.get(baseline)
        if zygote is None or zygote.process.dead:
            if zygote is not None:
                zygote.close()
            zygote = self._zygotes[baseline] = self._start_zygote(baseline)
        if wait and not zygote.readiness.ready:
            try:
                zygote.wait_ready(timeout or READY_TIMEOUT)
            except ZygoteError as exc:
                raise ZygoteError(f"{exc}: its preload of {', '.join(baseline.preload) or 'nothing'} did not finish "
                                  "within the test's timeout (--npu-lazy-timeout); the next test waits for it "
                                  "again") from None
            for text in zygote.readiness.warnings:
                self._warn(text)
        return zygote

    def _warn(self, text: str) -> None:
        record_warning_text(self.session.config, text, filename="<npu_lazy zygote>")

    def _start_zygote(self, baseline: Baseline) -> ZygoteHandle:
        if self._root is None:
            raise ZygoteError("no root zygote: the session did not start one")
        key = repr(baseline)
        try:
            send(self._root, messages.StartZygote(key, baseline.to_dict()))
            started, fds = self._from_root(lambda m: isinstance(m, messages.ZygoteStarted) and m.key == key,
                                           FORK_TIMEOUT)
        except (ChannelClosed, OSError):
            self._restart_root()
            return self._start_zygote(baseline)
        if started is None:
            raise ZygoteError(f"the root zygote did not answer within {FORK_TIMEOUT:.0f} s")
        channel = Channel(_socket_from_fd(fds[0]))
        return ZygoteHandle(ZygoteProcess(baseline, started.pid, channel,
                                          death_status=lambda: self._zygote_status(started.pid)))

    def _from_root(self, wanted: Callable[[object], bool], timeout: float):
        """The root channel's one reader: records every zygote exit, returns the first message ``wanted``
        accepts with its descriptors, or ``(None, [])`` after ``timeout``. ChannelClosed when the root is gone."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, []
            message, fds = messages.FROM_ROOT.receive(self._root, remaining)
            if message is None:
                return None, []
            if isinstance(message, messages.ChildExited):
                self._zygote_exits[message.pid] = message.status
            if wanted(message):
                return message, fds

    def _zygote_status(self, pid: int, timeout: float = 5.0) -> int | None:
        """How a zygote ended, as its parent (the root) saw it."""
        if pid not in self._zygote_exits and self._root is not None:
            try:
                self._from_root(lambda m: isinstance(m, messages.ChildExited) and m.pid == pid, timeout)
            except ChannelClosed:
                return None
        return self._zygote_exits.get(pid)

    def _restart_root(self) -> None:
        """The root died: fork a new one from this (already collected) process and say so."""
        if self.root_restarts >= 3:
            raise ZygoteError("the root zygote died three times; giving up on fork isolation for this session")
        self.root_restarts += 1
        if self._root is not None:
            self._root.close()
        self.start_root()
        self._warn(
            "the root zygote died and was forked again from the pytest process, which has imported test "
            "modules by now; modules they imported are part of the new baseline, and the npu_lazy guard "
            "reports any test that asserts about them.")

    def child(self, item, settings) -> ChildHandle:
        """A forked child that was sent ``item``'s Prepare (the Launcher contract of the controller)."""
        prepared = self._prepared.pop(item.nodeid, None)
        if prepared is not None and not prepared.zygote.process.dead:
            if prepared.zygote.process.module_key is not None:
                self.modules.serving(prepared.zygote.process.module_key)
            return prepared
        if prepared is not None:  # its zygote died (or was stopped) since: it went with it
            prepared.close()
        zygote = self._zygote_for(item, settings, wait=True)
        if zygote.readiness.error:
            raise ZygoteError(f"{settings.baseline.label} could not be prepared: {zygote.readiness.error}")
        key = zygote.process.module_key
        try:
            child = zygote.take_child()
        except ZygoteError:
            if key is None:
                raise
            self.modules.give_up(key)  # it refused to fork or died: this module's tests collect themselves
            key, child = None, self._zygote(settings.baseline, timeout=settings.timeout).take_child()
        if key is not None:
            self.modules.serving(key)
        send(child.channel, prepare_message(item, settings))
        return child

    def prepare(self, item, settings) -> None:
        """Let a spare child collect the next test while this one runs (not while a preload is running),
        and start the next modules' zygotes while this module's tests run."""
        try:
            self._prepare_child(item, settings)
        finally:
            self._start_ahead(item, settings)

    def _ready_base(self, baseline: Baseline) -> ZygoteHandle | None:
        """The baseline's zygote if it has finished its preload without error: only then is it asked for
        anything ahead of a test (a preload still running is waited for by the test that needs it)."""
        base = self._zygotes.get(baseline)
        return base if base is not None and base.readiness.ready and not base.readiness.error else None

    def _prepare_child(self, item, settings) -> None:
        if item.nodeid in self._prepared or self._ready_base(settings.baseline) is None:
            return
        try:
            zygote = self._zygote_for(item, settings, wait=False)
            if not zygote.readiness.ready:
                return  # a module zygote still collecting: the test takes its child when it is ready
            child = zygote.take_child()  # the fork asked for a moment ago: waiting overlaps the running test
        except ZygoteError:
            return
        try:
            send(child.channel, prepare_message(item, settings))
        except OSError:
            child.close()
            return
        self._prepared[item.nodeid] = child

    def expect(self, item, settings) -> None:
        """``item`` will run in this process: its module zygote goes after its module's last test."""
        if self.modules.enabled and settings.isolation == "fork":
            self.modules.expect(module_key(item, settings), item, settings)

    def _start_ahead(self, item, settings) -> None:
        """While ``item``'s module runs, have the next modules' zygotes import and collect theirs, then fork
        each one's first child: the first test of a module then waits for a message, as every other test
        does, not for an import.

        Only from a module whose own zygote is up, one new start per test (their imports share the CPU with
        the tests), and only where it fits the count and memory limits without stopping another. The first
        time one is seen ready is handled as in :meth:`_zygote_for` (its collection's warnings, its memory).
        """
        key = module_key(item, settings) if self.modules.enabled and settings.isolation == "fork" else None
        current = self.modules.peek(key) if key is not None else None
        if current is None or not current.readiness.ready:
            return
        for run in self.modules.ahead_of(key):
            zygote = self.modules.peek(run.key)
            if zygote is not None and zygote.readiness.ready:
                continue
            if zygote is None and (not self.modules.usable(run.key) or not self.modules.room_ahead()
                                   or self._ready_base(run.settings.baseline) is None):
                return
            try:
                zygote = self._zygote_for(run.item, run.settings, wait=False)  # started, or polled
                if zygote.readiness.ready and zygote.process.module_key is not None and not zygote.readiness.error:
                    zygote.request_fork()  # its first test's spare child, forked now
            except (ZygoteError, OSError):
                return  # that module's first test finds out, as it did before it was started ahead
            if not zygote.readiness.ready:
                return  # one import at a time

    def release(self, item, settings) -> None:
        """``item``'s child is done (the Launcher contract): stop its module zygote if that was the last test."""
        if self.modules.enabled:
            self.modules.done_with(module_key(item, settings))

    def _zygote_for(self, item, settings, wait: bool) -> ZygoteHandle:
        """The zygote to fork ``item``'s child from: its module zygote where one can serve, else its baseline's."""
        base = self._zygote(settings.baseline, timeout=settings.timeout)
        key = module_key(item, settings) if self.modules.enabled else None
        if key is None or not self.modules.usable(key) or base.readiness.error:
            return base
        zygote = self.modules.get(key)
        if zygote is None or zygote.process.dead:
            if zygote is not None:
                self.modules.close(key)
            self.modules.room_for_one()
            target = module_target(item)
            try:
                zygote = base.start_module(messages.StartModuleZygote(
                    repr(key), settings.to_dict(), target.to_dict()), key)
            except ZygoteError:
                self.modules.start_failed(key)
                return base
            self.modules.add(key, zygote)
        if not zygote.readiness.ready:
            try:  # within the test's timeout: past it, the test's own child shows where the import hangs
                zygote.wait_ready(settings.timeout or READY_TIMEOUT) if wait else zygote.poll()
            except ZygoteError:
                self.modules.give_up(key)
                return base
        if zygote.readiness.ready and not self.modules.seen_ready(key):  # once, the first time it is seen ready
            for text in zygote.readiness.warnings:
                self._warn(text)
            self.modules.measured(key, zygote.process.pid)
        return zygote

    def shutdown(self) -> None:
        self.modules.shutdown()
        for child in self._prepared.values():
            child.close()
        self._prepared.clear()
        for zygote in self._zygotes.values():
            zygote.close()
        self._zygotes.clear()
        if self._root is not None:
            try:
                send(self._root, messages.Shutdown())
            except OSError:
                pass
            self._root.close()
            self._root = None
        if self.root_pid is not None:
            wait_or_kill(self.root_pid)
            self.root_pid = None


"""One zygote as the pytest process holds it, and the test children it forks.

A zygote answers everything on one channel, in the order things happen, so
:class:`ZygoteHandle` is that channel's one reader: each wait (for the
zygote's readiness, a child, a child's exit status, a module zygote it
starts) reads whatever comes and hands each message to the part it concerns:
:class:`ZygoteProcess` (the process and the channel), :class:`ZygoteReadiness`
(its preload or collection finished, and what that said), :class:`SpareChild`
(the child forked ahead of the test that takes it) and :class:`ZygoteRecords`
(exits and started module zygotes that a wait has not collected yet). Which
zygote serves which test is :mod:`.pool`'s business.
"""

from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from ...errors import ZygoteError
from ...forks.channel import Accepts, Channel, ChannelClosed, ProtocolError, describe_status, send
from ...forks.server import READY_TIMEOUT
from ...settings import Baseline
from .. import messages
from .module_zygotes import ModuleKey

FORK_TIMEOUT = 60.0


#: the kernel's task flag for a process in exit (include/linux/sched.h), field 9 of /proc/<pid>/stat
_PF_EXITING = 0x4
#: SIGKILL in field 31 of /proc/<pid>/stat, the task's pending signals: a kill sent, not yet acted on (the kernel
#: marks a fatal signal pending on every thread of the process)
_SIGKILL_PENDING = 1 << (signal.SIGKILL - 1)


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

    def gone(self) -> bool:
        """Whether it died before it was given its test (another test killed it, say): its socket hung up, or
        the process is ending or ended. A SIGKILL sent shows as pending before the process acts on it; Linux marks
        a process that is tearing itself down PF_EXITING (it still shows state R for a few milliseconds), then
        shows it as a zombie until its zygote reaps it, then not at all."""
        if self.channel.hung_up():
            return True
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except FileNotFoundError:
            return True
        except OSError:  # no /proc: the socket's answer stands
            return False
        return (fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING)
                or bool(int(fields[28]) & _SIGKILL_PENDING))

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
        """Send ``message``; a zygote gone (a broken pipe: it was killed while a test ran) marks it dead and raises
        ZygoteError, which every caller already handles as a zygote that died, never an INTERNALERROR."""
        try:
            send(self.channel, message)
        except OSError as exc:
            self.dead = True
            raise ZygoteError(f"the zygote (pid {self.pid}, {self.label}) died: {exc.strerror or exc}") from None

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
        return ChildHandle(message.pid, Channel(socket_from_fd(fds[0])), self)

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

    def take_child(self, spare_after: Callable[[], bool] = lambda: True) -> ChildHandle:
        """The child forked ahead (or one forked now), and, where ``spare_after()`` says another test will want
        one, the next test's child forked while this one runs. A spare that died waiting (another test killed
        it) is dropped for a fresh one."""
        if self.spare.child is not None and self.spare.child.gone():
            self.spare.close()
        if self.spare.child is None:
            self.request_fork()
            self._pump_until(lambda: self.spare.child is not None, "fork")
        child = self.spare.take()
        assert child is not None, "there was one, or _pump_until waited for it"
        if spare_after():
            self.request_fork()
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
        return ZygoteHandle(ZygoteProcess(self.process.baseline, pid, Channel(socket_from_fd(fd)), module_key=key,
                                          death_status=lambda: self.exit_status(pid, 5.0)))

    def close(self) -> None:
        self.spare.close()
        self.process.close()  # dead from here on: a child prepared from it is not handed out any more


def socket_from_fd(fd: int) -> socket.socket:
    return socket.socket(fileno=fd)

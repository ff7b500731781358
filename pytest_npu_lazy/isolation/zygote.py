"""Fork server: clean interpreters for isolated tests, without paying for imports per test.

At session start, before any test module is imported, the pytest process
forks a *root* zygote. The root forks one zygote per preload baseline on
demand; each zygote imports its baseline (``torch`` by default) once and
then forks a child per test. The pytest process talks to each zygote and
each child over its own socket (see :mod:`.protocol`).

The next child is forked while the current test runs, so a test waits only
for a socket message, not for a fork.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from .child import serve_child
from ..errors import NpuLazyWarning, ZygoteError
from .logs import existing_loggers, quiet_preload_loggers
from .processes import ChildWatcher, die_with_parent, fork_hazard, kill_group, set_title
from .protocol import Channel, ChannelClosed, Message, describe_status
from ..probe.recorder import RECORDER
from ..settings import Baseline
from .target import order

_POLL = 0.05
READY_TIMEOUT = 600.0  # importing a baseline may compile or download nothing, but can be slow
FORK_TIMEOUT = 60.0


# -- server side: runs in forked processes, never returns into pytest ---------

_WATCHER = ChildWatcher()
#: how a server ends its children: the root lets zygotes clean up, a zygote kills test groups
_CHILD_STOP_SIGNAL = signal.SIGKILL


def _become_server(child_stop_signal: int, title: tuple[str, str]) -> None:
    """A server ignores the terminal's Ctrl-C: the pytest process decides when it ends."""
    global _WATCHER, _CHILD_STOP_SIGNAL
    set_title(*title)
    _WATCHER, _CHILD_STOP_SIGNAL = ChildWatcher(), child_stop_signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate)
    die_with_parent(signal.SIGTERM)
    RECORDER.reset_after_fork()


def _terminate(signum=None, frame=None) -> None:
    _WATCHER.kill_all(_CHILD_STOP_SIGNAL, groups=_CHILD_STOP_SIGNAL == signal.SIGKILL)
    _WATCHER.wait_all()
    os._exit(0)


def _serve(channel: Channel, handle) -> None:
    """Wait for messages and child exits until the pytest process goes away."""
    while True:
        wait = [channel.sock, *_WATCHER.fds()]
        timeout = _POLL if _WATCHER.needs_polling else None
        try:
            readable, _, _ = select.select(wait, [], [], timeout)
        except InterruptedError:  # pragma: no cover
            continue
        try:
            for pid, status in _WATCHER.reap():
                channel.send("child_exited", pid=pid, status=status)
            if channel.sock in readable:
                message = channel.recv()
                if message.kind == "shutdown":
                    _terminate()
                handle(message)
        except (ChannelClosed, OSError):
            _terminate()  # the pytest process is gone or done with us


def serve_root(channel: Channel, session) -> None:
    _become_server(signal.SIGTERM, ("root", f"forks a zygote per preload baseline for pytest {os.getppid()}"))

    def handle(message: Message) -> None:
        if message.kind != "start_zygote":
            return
        baseline = Baseline.from_dict(message.payload["baseline"])
        ours, theirs = Channel.pair()
        pid = os.fork()
        if pid == 0:
            _run_forked(lambda: serve_zygote(theirs, session, baseline), close=[channel, ours])
        theirs.close()
        _WATCHER.add(pid)
        channel.send("zygote_started", fds=[ours.fileno()], pid=pid, key=message.payload["key"])
        ours.close()

    _serve(channel, handle)


def serve_zygote(channel: Channel, session, baseline: Baseline) -> None:
    _become_server(signal.SIGKILL, ("zygote", f"preload {list(baseline.preload)}"))
    os.environ.update(baseline.environment())
    RECORDER.set_phase("preload")
    loggers = existing_loggers()
    with _captured_output() as output:
        error = import_preload(baseline)
    quiet_preload_loggers(session.config, loggers)
    RECORDER.sweep()
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()  # children then share the heap instead of copying it on first collection
    channel.send("ready", pid=os.getpid(), error=error, output=output.read(), warnings=_thread_warnings())

    def handle(message: Message) -> None:
        if message.kind != "fork_child":
            return
        hazard = fork_hazard()
        if hazard:
            channel.send("fork_refused", reason=hazard + ". Keep device work out of the preload baseline, or run "
                         "the test with @pytest.mark.npu_lazy(isolation='spawn').")
            return
        ours, theirs = Channel.pair()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            _run_forked(lambda: serve_child(theirs, session, baseline, "fork"), close=[channel, ours])
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child already did it, or is gone; either is fine
        theirs.close()
        _WATCHER.add(pid)
        channel.send("child_forked", fds=[ours.fileno()], pid=pid)
        ours.close()

    _serve(channel, handle)


def import_preload(baseline: Baseline) -> str | None:
    """Import the baseline; the error text when one of its modules fails."""
    for module in baseline.preload:
        try:
            importlib.import_module(module)
        except BaseException:  # report any failure, even SystemExit from a module
            return f"importing preload module {module!r} failed:\n{traceback.format_exc()}"
    return None


class _Output:
    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile()

    def read(self) -> str:
        self.file.seek(0)
        return self.file.read().decode("utf-8", "replace")


@contextlib.contextmanager
def _captured_output():
    """What the preload prints belongs in the report, not scattered over the terminal."""
    output = _Output()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    os.dup2(output.file.fileno(), 1)
    os.dup2(output.file.fileno(), 2)
    try:
        yield output
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, original in zip((1, 2), saved):
            os.dup2(original, fd)
            os.close(original)


def _run_forked(body, close) -> None:
    """Run ``body`` in a fresh fork and never return into the caller's code."""
    code = 1
    try:
        for other in close:
            other.close()
        body()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except (BrokenPipeError, ConnectionResetError):
        pass  # the pytest process went away (killed, or its xdist controller was): nothing to report to
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _thread_warnings() -> list[str]:
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if not others:
        return []
    return [f"the zygote has {len(others)} Python thread(s) besides the main one ({', '.join(others)}) "
            "after its preload; forked children get none of them, and locks those threads held stay "
            "locked in the children."]


# -- client side: lives in the pytest process ---------------------------------

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
        if not self.zygote.dead:
            return None
        status = self.zygote.death_status()
        return (f"the zygote (pid {self.zygote.pid}, {self.zygote.baseline.label}) died while this test ran, "
                f"with {describe_status(status)}; its children died with it. A new zygote serves the next tests.")

    def close(self) -> None:
        self.channel.close()


@dataclass
class ZygoteHandle:
    baseline: Baseline
    pid: int
    channel: Channel
    ready: bool = False
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    spare: ChildHandle | None = None
    fork_requested: bool = False
    exited: dict[int, int] = field(default_factory=dict)
    dead: bool = False
    #: asks the root how this zygote ended; set by the pool
    death_status: Callable[[], int | None] = lambda: None

    def _handle(self, message: Message) -> ChildHandle | None:
        if message.kind == "ready":
            self.ready, self.error = True, message.payload["error"]
            self.warnings = list(message.payload["warnings"])
            if message.payload["output"].strip():
                self.warnings.append(f"the zygote's preload {list(self.baseline.preload)} printed:\n"
                                     + message.payload["output"].rstrip())
        elif message.kind == "child_exited":
            self.exited[message.payload["pid"]] = message.payload["status"]
        elif message.kind == "child_forked":
            self.fork_requested = False
            return ChildHandle(message.payload["pid"], Channel(_socket_from_fd(message.fds[0])), self)
        elif message.kind == "fork_refused":
            self.fork_requested = False
            raise ZygoteError(f"the zygote ({self.baseline.label}) refused to fork: {message.payload['reason']}")
        return None

    def _pump(self, timeout: float | None) -> ChildHandle | None:
        try:
            message = self.channel.recv(timeout)
        except ChannelClosed:
            self.dead = True
            raise ZygoteError(f"the zygote (pid {self.pid}, {self.baseline.label}) died") from None
        return None if message is None else self._handle(message)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZygoteError(f"the zygote ({self.baseline.label}) did not finish its preload "
                                  f"within {timeout:.0f} s")
            self._pump(remaining)

    def request_fork(self) -> None:
        if not self.fork_requested and self.spare is None and not self.dead:
            self.channel.send("fork_child")
            self.fork_requested = True

    def take_child(self) -> ChildHandle:
        if self.spare is None:
            self.request_fork()
            deadline = time.monotonic() + FORK_TIMEOUT
            while self.spare is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ZygoteError(f"the zygote ({self.baseline.label}) did not fork within {FORK_TIMEOUT:.0f} s")
                child = self._pump(remaining)
                if child is not None:
                    self.spare = child
        child, self.spare = self.spare, None
        self.request_fork()  # the next test's child is forked while this one runs
        return child

    def exit_status(self, pid: int, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while pid not in self.exited and not self.dead:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                child = self._pump(remaining)
            except ZygoteError:
                return None
            if child is not None:
                self.spare = child
        return self.exited.pop(pid, None)

    def close(self) -> None:
        if self.spare is not None:
            self.spare.close()
            self.spare = None
        try:
            self.channel.send("shutdown")
        except OSError:
            pass
        self.channel.close()


def _socket_from_fd(fd: int) -> socket.socket:
    return socket.socket(fileno=fd)


class ZygotePool:
    """The pytest process's view of its zygotes: start, hand out children, restart, stop."""

    def __init__(self, session) -> None:
        self.session = session
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
            _run_forked(lambda: serve_root(theirs, self.session), close=[ours])
        theirs.close()
        self.root_pid, self._root = pid, ours

    def warm(self, baselines) -> None:
        """Start zygotes for these baselines now, so their preloads overlap."""
        for baseline in baselines:
            self._zygote(baseline, wait=False)

    def _zygote(self, baseline: Baseline, wait: bool = True) -> ZygoteHandle:
        zygote = self._zygotes.get(baseline)
        if zygote is None or zygote.dead:
            if zygote is not None:
                zygote.close()
            zygote = self._zygotes[baseline] = self._start_zygote(baseline)
        if wait and not zygote.ready:
            zygote.wait_ready()
            for text in zygote.warnings:
                self._warn(text)
        return zygote

    def _warn(self, text: str) -> None:
        import warnings

        self.session.config.hook.pytest_warning_recorded.call_historic(kwargs=dict(
            warning_message=warnings.WarningMessage(NpuLazyWarning(text), NpuLazyWarning, "<npu_lazy zygote>", 0),
            when="runtest", nodeid="", location=None))

    def _start_zygote(self, baseline: Baseline) -> ZygoteHandle:
        if self._root is None:
            raise ZygoteError("no root zygote: the session did not start one")
        key = repr(baseline)
        try:
            self._root.send("start_zygote", key=key, baseline=baseline.to_dict())
            while True:
                message = self._root.recv(FORK_TIMEOUT)
                if message is None:
                    raise ZygoteError("the root zygote did not answer within "
                                      f"{FORK_TIMEOUT:.0f} s")
                if message.kind == "zygote_started" and message.payload["key"] == key:
                    channel = Channel(_socket_from_fd(message.fds[0]))
                    pid = message.payload["pid"]
                    return ZygoteHandle(baseline, pid, channel, death_status=lambda: self._zygote_status(pid))
                if message.kind == "child_exited":
                    self._zygote_exits[message.payload["pid"]] = message.payload["status"]
        except (ChannelClosed, OSError):
            self._restart_root()
            return self._start_zygote(baseline)

    def _zygote_status(self, pid: int, timeout: float = 5.0) -> int | None:
        """How a zygote ended, as its parent (the root) saw it."""
        deadline = time.monotonic() + timeout
        while pid not in self._zygote_exits and self._root is not None:
            remaining = deadline - time.monotonic()
            try:
                message = self._root.recv(max(remaining, 0)) if remaining > 0 else None
            except ChannelClosed:
                return None
            if message is None:
                return None
            if message.kind == "child_exited":
                self._zygote_exits[message.payload["pid"]] = message.payload["status"]
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
        """A forked child collecting ``item`` (the Launcher protocol of the controller)."""
        prepared = self._prepared.pop(item.nodeid, None)
        if prepared is not None and not prepared.zygote.dead:
            return prepared
        if prepared is not None:  # its zygote died since: it died with it
            prepared.close()
        zygote = self._zygote(settings.baseline)
        if zygote.error:
            raise ZygoteError(f"{settings.baseline.label} could not be prepared: {zygote.error}")
        child = zygote.take_child()
        child.channel.send("prepare", **order(item, settings))
        return child

    def prepare(self, item, settings) -> None:
        """Let a spare child collect the next test while this one runs (not while a preload is running)."""
        zygote = self._zygotes.get(settings.baseline)
        if item.nodeid in self._prepared or zygote is None or not zygote.ready or zygote.error:
            return
        try:
            child = zygote.take_child()  # the fork asked for a moment ago: waiting overlaps the running test
        except ZygoteError:
            return
        try:
            child.channel.send("prepare", **order(item, settings))
        except OSError:
            child.close()
            return
        self._prepared[item.nodeid] = child

    def shutdown(self) -> None:
        for child in self._prepared.values():
            child.close()
        self._prepared.clear()
        for zygote in self._zygotes.values():
            zygote.close()
        self._zygotes.clear()
        if self._root is not None:
            try:
                self._root.send("shutdown")
            except OSError:
                pass
            self._root.close()
            self._root = None
        if self.root_pid is not None:
            _wait_or_kill(self.root_pid)
            self.root_pid = None


def _wait_or_kill(pid: int, grace: float = 5.0) -> None:
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.01)
    kill_group(pid, signal.SIGKILL)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass

"""The run_python zygote: a fresh ``python -c`` that imported a preload and forks a child per call.

It is started by :mod:`pytest_npu_lazy.python_c.pool` as ``python -c <boot.py>``
with the environment of the first call that needs it, so the interpreter,
its flags, ``sys.path`` and the preload are exactly what ``python -c CODE``
would have had after its first ``import``. It never holds pytest or the
test's modules: the pytest process is never forked for run_python.

Per call it forks a child (:func:`pytest_npu_lazy.python_c.child.become`), which
leads its own process group; the zygote reports the child's wait status on
the call's own socket, kills the group on request (the caller's timeout) or
when the caller stops listening, and kills what the code left running when
it exits.

It lives until the caller says :class:`~.messages.Shutdown`, closes its end
of the control socket (it died), or sends SIGTERM; then it kills its
children's groups and exits.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import threading
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from . import messages
from ..isolation.processes import ChildWatcher, fork_hazard, kill_group
from ..isolation.protocol import Channel, ChannelClosed
from .child import ChildContext, become, end

_POLL = 0.05


@dataclass
class _Call:
    channel: Channel | None  # None once the caller went away
    setup: int  # read end of the child's set-up pipe


class _Server:
    def __init__(self, control: Channel, context: ChildContext) -> None:
        self.control = control
        self.context = context
        self.watcher = ChildWatcher()
        self.calls: dict[int, _Call] = {}

    def loop(self) -> tuple[Any, dict]:
        """Serve until told to stop; in a forked child, return what the bootstrap executes."""
        while True:
            callers = {call.channel.sock: pid for pid, call in self.calls.items() if call.channel is not None}
            waiting = [self.control.sock, *callers, *self.watcher.fds()]
            try:
                readable, _, _ = select.select(waiting, [], [], _POLL if self.watcher.needs_polling else None)
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            for pid, status in self.watcher.reap():
                self._exited(pid, status)
            for sock in readable:
                if sock in callers and callers[sock] in self.calls:
                    self._from_caller(callers[sock])
            if self.control.sock in readable:
                result = self._from_control()
                if result is not None:
                    return result

    def _from_control(self) -> tuple[Any, dict] | None:
        while True:
            try:
                message, fds = messages.receive(self.control, timeout=0)
            except ChannelClosed:
                self.terminate()  # the caller is gone
            if message is None:
                return None
            if isinstance(message, messages.Shutdown):
                self.terminate()
            if isinstance(message, messages.Run):
                result = self._fork(message, fds)
                if result is not None:
                    return result

    def _from_caller(self, pid: int) -> None:
        call = self.calls[pid]
        try:
            message, _ = messages.receive(call.channel, timeout=0)
        except ChannelClosed:  # the caller stopped waiting (interrupted, or dead): the code dies with it
            message = messages.Kill()
            call.channel.close()
            call.channel = None
        if isinstance(message, messages.Kill):
            _kill(pid)

    def _fork(self, run: messages.Run, fds: list[int]) -> tuple[Any, dict] | None:
        named = dict(zip(messages.RUN_FDS if run.stdin else messages.RUN_FDS[:-1], fds))
        setup_read, setup_write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(setup_read)
            sockets = [self.control.sock, *(c.channel.sock for c in self.calls.values() if c.channel)]
            return become(run, named, setup_write, self.context, sockets)
        os.close(setup_write)
        try:
            os.setpgid(pid, pid)  # the child does it too; whoever is first wins the race with the caller's kill
        except OSError:
            pass
        for name, fd in named.items():
            if name != "call":
                os.close(fd)
        channel = Channel(socket.socket(fileno=named["call"]))
        self.calls[pid] = _Call(channel, setup_read)
        self.watcher.add(pid)
        return None

    def _exited(self, pid: int, status: int) -> None:
        call = self.calls.pop(pid)
        with os.fdopen(call.setup, "rb") as pipe:
            outcome = messages.SetupOutcome.from_json(pipe.read())
        if call.channel is None:
            return
        try:
            messages.send(call.channel, messages.Exited(status, outcome and asdict(outcome)))
        except OSError:
            pass
        call.channel.close()

    def terminate(self, signum=None, frame=None) -> None:
        for pid in self.watcher.pids:
            _kill(pid)
        self.watcher.wait_all()
        os._exit(0)


def _kill(pid: int) -> None:
    """The child and its whole group; the child is not reaped yet, so its pid names no other group."""
    kill_group(pid, signal.SIGKILL)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def serve(control_fd: int, main: dict, state: dict, reads: list[str], error: str | None) -> tuple[Any, dict]:
    """Report the preload, then serve calls; returns only in a forked child: (code, namespace) to exec."""
    control = Channel(socket.socket(fileno=control_fd))
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    ready = messages.Ready(os.getpid(), error, reads, None if error else fork_hazard(), threads, state["environ"])
    messages.send(control, ready)
    if ready.error or ready.hazard:
        os._exit(0)  # the caller runs these calls as plain subprocesses
    context = ChildContext.capture(main, state)
    server = _Server(control, context)
    gc.collect()
    gc.freeze()  # children share the preload's heap instead of copying it page by page at each collection
    signal.signal(signal.SIGTERM, server.terminate)
    return server.loop()


def finish(exc: BaseException | None) -> None:
    """pyboot's last call: how the code ended (None, or what it raised); never returns."""
    if not ChildContext.in_child:  # the zygote itself failed: its stderr reaches the caller's error message
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        sys.stderr.flush()
        os._exit(1)
    end(exc)

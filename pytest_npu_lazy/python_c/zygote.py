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
children's groups and exits. The loop, reaping and ending are
:class:`pytest_npu_lazy.forks.server.ForkServer`'s; here is what a call adds.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from . import messages
from ..forks.channel import Channel, ChannelClosed
from ..forks.processes import fork_hazard
from ..forks.server import ForkServer, freeze_heap, other_threads
from .child import ChildContext, become, end


@dataclass
class _ZygoteCall:
    """One call as the zygote keeps it while its child runs (the caller's side is :class:`~.call._CallerCall`)."""

    channel: Channel | None  # None once the caller went away
    setup: int  # read end of the child's set-up pipe


class PythonCZygoteServer(ForkServer):
    """Forks a child per :class:`~.messages.RunCode`; each call's socket says Kill, or that its caller went away."""

    MESSAGES = messages.TO_ZYGOTE
    NAME = "run_python zygote"

    def __init__(self, control: Channel, context: ChildContext) -> None:
        super().__init__(control)
        self.context = context
        self.calls: dict[int, _ZygoteCall] = {}

    def on_run(self, run: messages.RunCode, fds: list[int]) -> tuple[Any, dict] | None:
        """Fork the call's child; in the child, return (code, namespace) for the bootstrap to exec."""
        named = dict(zip(messages.RUN_FDS if run.stdin else messages.RUN_FDS[:-1], fds))
        setup_read, setup_write = os.pipe()
        pid = self.fork(own_group=True)
        if pid == 0:
            os.close(setup_read)
            sockets = [self.control.sock, *(c.channel.sock for c in self.calls.values() if c.channel)]
            return become(run, named, setup_write, self.context, sockets)
        os.close(setup_write)
        for name, fd in named.items():
            if name != "call":
                os.close(fd)
        self.calls[pid] = _ZygoteCall(Channel(socket.socket(fileno=named["call"])), setup_read)
        return None

    def side_channels(self) -> dict[Any, int]:
        return {call.channel.sock: pid for pid, call in self.calls.items() if call.channel is not None}

    def side_readable(self, pid: int) -> None:
        """The call's caller said Kill, or stopped waiting (interrupted, or dead): the code dies with it."""
        call = self.calls.get(pid)
        if call is None or call.channel is None:
            return
        try:
            message, _ = messages.FROM_CALLER.receive(call.channel, timeout=0)
        except ChannelClosed:
            message = messages.Kill()
            call.channel.close()
            call.channel = None
        if isinstance(message, messages.Kill):
            self.watcher.kill(pid)

    def child_ended(self, pid: int, status: int) -> None:
        call = self.calls.pop(pid)
        with os.fdopen(call.setup, "rb") as pipe:
            outcome = messages.SetupOutcome.from_json(pipe.read())
        if call.channel is None:
            return
        try:
            messages.send(call.channel, messages.Exited(status, None if outcome is None else asdict(outcome)))
        except OSError:
            pass
        call.channel.close()


def serve(control_fd: int, main: dict, state: dict, reads: list[str], error: str | None) -> tuple[Any, dict]:
    """Report the preload, then serve calls; returns only in a forked child: (code, namespace) to exec."""
    control = Channel(socket.socket(fileno=control_fd))
    ready = messages.CodeZygoteReady(os.getpid(), error, reads, None if error else fork_hazard(), other_threads(),
                           state["environ"])
    messages.send(control, ready)
    if ready.error or ready.hazard:
        os._exit(0)  # the caller runs these calls as plain subprocesses
    server = PythonCZygoteServer(control, ChildContext.capture(main, state))
    freeze_heap()
    server.end_on_sigterm()
    return server.serve()


def finish(exc: BaseException | None) -> None:
    """boot.py's last call: how the code ended (None, or what it raised); never returns."""
    if not ChildContext.in_child:  # the zygote itself failed: its stderr reaches the caller's error message
        if exc is not None:  # always: serve() returns only in a child
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        sys.stderr.flush()
        os._exit(1)
    end(exc)

"""The fork servers: the root zygote and the zygotes it forks. Runs in forked processes, never in pytest.

At session start, before any test module is imported, the pytest process
forks the *root* (:class:`..pytest_side.pool.ZygotePool`). The root forks one
zygote per preload baseline on demand; each zygote imports its baseline
(``torch`` by default) once and then forks a test child
(:func:`..child_side.child.serve_child`) per request, or a module zygote
(:mod:`.module_collection`) that collected one test module. The servers
answer only the messages of :mod:`..messages` and end when the pytest
process says Shutdown or goes away.

They are front ends on :class:`pytest_npu_lazy.forks.server.ForkServer`: the
loop, reaping and ending live there; here is only what each server does
with the messages it accepts (one ``on_<kind>`` method each).
"""

from __future__ import annotations

import os
import signal

from ... import compat
from ...forks.channel import Channel, MessageType, send
from ...forks.processes import die_with_parent, fork_hazard, set_title, threads_warning
from ...forks.server import ForkServer, freeze_heap, other_threads, run_forked
from ...probe.recorder import RECORDER
from ...settings import Baseline, TestSettings
from .. import messages
from ..child_side.child import serve_child
from ..child_side.collected import serve_collected_child
from ..child_side.find import collect_towards
from ..preload import import_preload
from ..target import Target
from .module_collection import ModuleCollection


class _IsolationServer(ForkServer):
    """What the root and every zygote share: a title, no Ctrl-C of their own, and an exit reported upstream."""

    MESSAGES: tuple[MessageType, ...] = messages.TO_ZYGOTE  # each server accepts, of these, the kinds it has handlers for
    NAME = "zygote server"

    def __init__(self, channel: Channel, session, title: tuple[str, str]) -> None:
        super().__init__(channel)
        self.session = session
        set_title(*title)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the pytest process decides when a server ends
        self.end_on_sigterm()
        die_with_parent(signal.SIGTERM)
        RECORDER.reset_after_fork()

    def child_ended(self, pid: int, status: int) -> None:
        send(self.control, messages.ChildExited(pid, status))

    def ready(self, error: str | None = None, output: str = "") -> None:
        """Tell the pytest process this server may fork: after its import, with the heap frozen."""
        RECORDER.sweep()
        compat.warm_warning_filters(self.session.config)  # every child applies them: compiled once, here
        freeze_heap()
        send(self.control, messages.TestZygoteReady(os.getpid(), error, output, _thread_warnings()))

    def fork_server(self, key: str, serve) -> None:
        """Fork a zygote (or module zygote) that runs ``serve(its channel)``; hand the pytest process that channel."""
        ours, theirs = Channel.pair()
        pid = self.fork(own_group=False)
        if pid == 0:
            run_forked(lambda: serve(theirs), close=[self.control, ours])
        theirs.close()
        send(self.control, messages.ZygoteStarted(key, pid), fds=[ours.fileno()])
        ours.close()

    def fork_test_child(self, serve) -> None:
        """Fork a spare test child, the leader of its own process group, and hand the pytest process its channel."""
        hazard = fork_hazard()
        if hazard:
            send(self.control, messages.ForkRefused(
                hazard + ". Keep device work out of the preload baseline, or run the test with "
                "@pytest.mark.npu_lazy(isolation='spawn')."))
            return
        ours, theirs = Channel.pair()
        pid = self.fork(own_group=True)
        if pid == 0:
            run_forked(lambda: serve(theirs), close=[self.control, ours])
        theirs.close()
        send(self.control, messages.ChildForked(pid), fds=[ours.fileno()])
        ours.close()


class RootServer(_IsolationServer):
    """Forks one zygote per preload baseline; lets a zygote end its own children (SIGTERM) when it ends."""

    CHILD_STOP_SIGNAL = signal.SIGTERM
    MESSAGES = messages.TO_ROOT

    def on_start_zygote(self, message: messages.StartZygote, fds) -> None:
        baseline = Baseline.from_dict(message.baseline)
        self.fork_server(message.key, lambda theirs: serve_zygote(theirs, self.session, baseline))


class IsolationZygoteServer(_IsolationServer):
    """Has imported one baseline; forks test children and module zygotes from it."""

    def on_fork_child(self, message: messages.ForkChild, fds) -> None:
        self.fork_test_child(lambda theirs: serve_child(theirs, self.session))

    def on_start_module_zygote(self, message: messages.StartModuleZygote, fds) -> None:
        self.fork_server(message.key, lambda theirs: serve_module_zygote(theirs, self.session, message))


class ModuleZygoteServer(_IsolationServer):
    """Has collected one test module; forks a test child per request from it, and starts no zygotes."""

    module: ModuleCollection  # collected once the server is set up, so the recorder's reset comes first

    def on_fork_child(self, message: messages.ForkChild, fds) -> None:
        self.fork_test_child(lambda theirs: serve_collected_child(theirs, self.session, self.module))
        self.module.forked += 1


def serve_root(channel: Channel, session) -> None:
    RootServer(channel, session, ("root", f"forks a zygote per preload baseline for pytest {os.getppid()}")).serve()


def serve_zygote(channel: Channel, session, baseline: Baseline) -> None:
    server = IsolationZygoteServer(channel, session, ("zygote", f"preload {list(baseline.preload)}"))
    collect_towards(session.config)  # registered once here, before the forks that collect
    os.environ.update(baseline.environment())
    error, output = import_preload(baseline.preload, session.config, capture=True)
    server.ready(error, output)
    server.serve()


def serve_module_zygote(channel: Channel, session, start: messages.StartModuleZygote) -> None:
    """Collect one module (:mod:`.module_collection`), then fork a test child per request from it."""
    target = Target.from_dict(start.target)
    server = ModuleZygoteServer(channel, session, ("module zygote", target.nodeid))
    server.module = ModuleCollection(session, TestSettings.from_dict(start.settings), target)
    server.ready()
    server.serve()


def _thread_warnings() -> list[str]:
    warning = threads_warning("the zygote", other_threads())
    return [warning] if warning else []

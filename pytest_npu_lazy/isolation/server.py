"""The fork servers: the root zygote and the zygotes it forks. Runs in forked processes, never in pytest.

At session start, before any test module is imported, the pytest process
forks the *root* (:class:`.pool.ZygotePool`). The root forks one zygote per
preload baseline on demand; each zygote imports its baseline (``torch`` by
default) once and then forks a test child (:func:`.child.serve_child`) per
request. Both servers answer only the messages of :mod:`.messages` and end
when the pytest process says :class:`~.messages.Shutdown` or goes away.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import sys
import threading
import traceback

from ..probe.recorder import RECORDER
from ..settings import Baseline, TestSettings
from . import messages
from .child import serve_child
from .collected import ModuleCollection, serve_collected_child
from .preload import import_preload
from .processes import ChildWatcher, die_with_parent, fork_hazard, set_title
from .protocol import Accepts, Channel, ChannelClosed, ProtocolError, send
from .target import Target

_POLL = 0.05
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


def _serve(channel: Channel, accepts: Accepts, handle) -> None:
    """Wait for messages and child exits until the pytest process says Shutdown or goes away."""
    while True:
        wait = [channel.sock, *_WATCHER.fds()]
        timeout = _POLL if _WATCHER.needs_polling else None
        try:
            readable, _, _ = select.select(wait, [], [], timeout)
        except InterruptedError:  # pragma: no cover
            continue
        try:
            for pid, status in _WATCHER.reap():
                send(channel, messages.ChildExited(pid, status))
            if channel.sock in readable:
                while True:  # every message that arrived: one read can bring several, and select sees no more
                    message, _ = accepts.receive(channel, timeout=0)
                    if message is None:
                        break
                    if isinstance(message, messages.Shutdown):
                        _terminate()
                    handle(message)
        except ProtocolError as exc:
            print(f"pytest-npu-lazy: a zygote server got {exc}; it ends", file=sys.stderr)
            _terminate()
        except (ChannelClosed, OSError):
            _terminate()  # the pytest process is gone or done with us


def serve_root(channel: Channel, session) -> None:
    _become_server(signal.SIGTERM, ("root", f"forks a zygote per preload baseline for pytest {os.getppid()}"))

    def handle(message: messages.StartZygote) -> None:
        baseline = Baseline.from_dict(message.baseline)
        fork_server(channel, message.key, lambda theirs: serve_zygote(theirs, session, baseline))

    _serve(channel, messages.ROOT_ACCEPTS, handle)


def serve_zygote(channel: Channel, session, baseline: Baseline) -> None:
    _become_server(signal.SIGKILL, ("zygote", f"preload {list(baseline.preload)}"))
    os.environ.update(baseline.environment())
    error, output = import_preload(baseline.preload, session.config, capture=True)
    RECORDER.sweep()
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()  # children then share the heap instead of copying it on first collection
    send(channel, messages.Ready(os.getpid(), error, output, _thread_warnings()))

    def handle(message) -> None:
        if isinstance(message, messages.StartModuleZygote):
            fork_server(channel, message.key, lambda theirs: serve_module_zygote(theirs, session, message))
        else:
            fork_test_child(channel, lambda theirs: serve_child(theirs, session))

    _serve(channel, messages.ZYGOTE_ACCEPTS, handle)


def serve_module_zygote(channel: Channel, session, start: messages.StartModuleZygote) -> None:
    """Collect one module (:mod:`.collected`), then fork a test child per request from it."""
    target = Target.from_dict(start.target)
    _become_server(signal.SIGKILL, ("module zygote", target.nodeid))
    module = ModuleCollection(session, TestSettings.from_dict(start.settings), target)
    RECORDER.sweep()
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    send(channel, messages.Ready(os.getpid(), None, "", _thread_warnings()))

    def handle(message: messages.ForkChild) -> None:
        if not isinstance(message, messages.ForkChild):
            raise ProtocolError(f"a module zygote starts no zygotes; it was sent {message!r}")
        fork_test_child(channel, lambda theirs: serve_collected_child(theirs, session, module))
        module.forked += 1

    _serve(channel, messages.ZYGOTE_ACCEPTS, handle)


def fork_server(channel: Channel, key: str, serve) -> None:
    """Fork a zygote (or module zygote) that runs ``serve(its channel)``; hand the pytest process that channel."""
    ours, theirs = Channel.pair()
    pid = os.fork()
    if pid == 0:
        run_forked(lambda: serve(theirs), close=[channel, ours])
    theirs.close()
    _WATCHER.add(pid)
    send(channel, messages.ZygoteStarted(key, pid), fds=[ours.fileno()])
    ours.close()


def fork_test_child(channel: Channel, serve) -> None:
    """Fork a spare test child, the leader of its own process group, and hand the pytest process its channel."""
    hazard = fork_hazard()
    if hazard:
        send(channel, messages.ForkRefused(
            hazard + ". Keep device work out of the preload baseline, or run the test with "
            "@pytest.mark.npu_lazy(isolation='spawn')."))
        return
    ours, theirs = Channel.pair()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        run_forked(lambda: serve(theirs), close=[channel, ours])
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # the child already did it, or is gone; either is fine
    theirs.close()
    _WATCHER.add(pid)
    send(channel, messages.ChildForked(pid), fds=[ours.fileno()])
    ours.close()


def run_forked(body, close) -> None:
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

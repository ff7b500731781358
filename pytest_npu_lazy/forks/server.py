"""The fork-server engine: one serve loop for every process that forks children on request.

Test isolation's root, zygotes and module zygotes (:mod:`pytest_npu_lazy.isolation.zygote_side.server`)
and run_python's zygote (:mod:`pytest_npu_lazy.python_c.zygote`) are all the same
thing: a process that waits on one control channel for requests, forks a
child per request, reaps its children and reports how each ended, and ends
itself, with every child and every child's process group, when its caller
says Shutdown, goes away, or sends SIGTERM. This module is that thing, once:
a bug in reaping, killing or the loop is fixed here for both front ends.

A front end subclasses :class:`ForkServer` and says what differs:

- one ``on_<kind>(message, fds)`` method per message kind it accepts on the
  control channel (the accepted set is derived from them,
  :meth:`~.channel.Accepts.handled_by`); a handler that returns something
  other than None ends the loop with that value (run_python's forked child
  returns the code it runs, up through the loop, to the zygote's bootstrap);
- :meth:`ForkServer.child_ended`: how a child's wait status is reported;
- :meth:`ForkServer.side_channels` and :meth:`ForkServer.side_readable`: other
  sockets it listens to (run_python's per-call sockets).

Nothing here imports pytest or torch: run_python's zygote loads this engine
and never holds pytest.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from .channel import Accepts, Channel, ChannelClosed, MessageType, ProtocolError
from .processes import ChildWatcher

#: how long the loop sleeps between polls where an exit cannot wake it (no pidfd)
POLL_SECONDS = 0.05
#: how long a caller waits for a new server's Ready: importing a preload may be slow, never this slow
READY_TIMEOUT = 600.0


#: a fork server's exit codes when something other than its caller ended it (0: told to, or its caller gone)
EXIT_PROTOCOL_ERROR = 3
EXIT_OS_ERROR = 4


@dataclass(frozen=True)
class Shutdown:
    """The caller is done with this server: end or kill its children, then exit. Every fork server handles it
    (:meth:`ForkServer.on_shutdown`), so it is defined once, here, and each front end's message list includes it."""

    KIND: ClassVar[str] = "shutdown"


class ForkServer:
    """Serve one control channel: dispatch its messages by kind, reap children, end with all of them."""

    #: the message types this server may be sent; it accepts those it has an ``on_<kind>`` handler for
    MESSAGES: tuple[MessageType, ...] = ()
    #: the signal its children get when it ends (SIGTERM lets a zygote end its own children first)
    CHILD_STOP_SIGNAL = signal.SIGKILL
    #: a name for messages to a person: "a zygote server got ..."
    NAME = "fork server"

    def __init__(self, control: Channel) -> None:
        self.control = control
        self.watcher = ChildWatcher()
        self.accepts = Accepts.handled_by(self, *self.MESSAGES)

    # -- what a front end may override -------------------------------------------------------------------

    def child_ended(self, pid: int, status: int) -> None:
        """A child was reaped with this wait status (its group was killed first)."""

    def side_channels(self) -> dict[Any, Any]:
        """Sockets to wait on besides the control channel, each to a key passed to :meth:`side_readable`."""
        return {}

    def side_readable(self, key: Any) -> None:
        """The socket of ``side_channels()[key]`` can be read."""

    def on_shutdown(self, message, fds: list[int]) -> None:
        self.terminate()

    # -- the engine ---------------------------------------------------------------------------------------

    def serve(self) -> Any:
        """Serve until told to stop (never returns then); returns only what a handler returned, in a fork."""
        while True:
            sides = self.side_channels()
            wait = [self.control.sock, *sides, *self.watcher.fds()]
            try:
                readable, _, _ = select.select(wait, [], [], POLL_SECONDS if self.watcher.needs_polling else None)
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            try:
                for pid, status in self.watcher.reap():
                    self.child_ended(pid, status)
                for sock in readable:
                    if sock in sides:
                        self.side_readable(sides[sock])
                if self.control.sock in readable:
                    result = self._drain_control()
                    if result is not None:
                        return result
            except ProtocolError as exc:
                print(f"pytest-npu-lazy: a {self.NAME} got {exc}; it ends", file=sys.stderr)
                self.terminate(exit_code=EXIT_PROTOCOL_ERROR)
            except (ChannelClosed, ConnectionError):  # BrokenPipeError, ConnectionResetError: writing to it
                self.terminate()  # the caller is gone or done with us: a normal end
            except OSError as exc:  # a fork refused (EAGAIN, ENOMEM), a descriptor gone: not a normal end
                print(f"pytest-npu-lazy: a {self.NAME} failed: {type(exc).__name__}: {exc}; it ends",
                      file=sys.stderr)
                self.terminate(exit_code=EXIT_OS_ERROR)

    def _drain_control(self) -> Any:
        """Every message that arrived: one read can bring several, and select then sees no more."""
        while True:
            message, fds = self.accepts.receive(self.control, timeout=0)
            if message is None:
                return None
            result = Accepts.dispatch(self, message, fds)
            if result is not None:
                return result

    def fork(self, *, own_group: bool) -> int:
        """Fork a child this server watches; 0 in the child. ``own_group``: it leads a new process group.

        Both sides set the group, so whichever runs first wins the race with a
        caller that kills the group at once.
        """
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            if own_group:
                os.setpgid(0, 0)
            return 0
        if own_group:
            try:
                os.setpgid(pid, pid)
            except OSError:
                pass  # the child already did it, or is gone; either is fine
        self.watcher.add(pid)
        return pid

    def terminate(self, signum=None, frame=None, exit_code: int = 0) -> None:
        """End every child (and, with SIGKILL, every child's group), reap them all, and exit: 0 when told to
        (shutdown, SIGTERM, its caller gone), else the code of what ended it (EXIT_*)."""
        self.watcher.kill_all(self.CHILD_STOP_SIGNAL, groups=self.CHILD_STOP_SIGNAL == signal.SIGKILL)
        self.watcher.wait_all()
        os._exit(exit_code)

    def end_on_sigterm(self) -> None:
        signal.signal(signal.SIGTERM, self.terminate)


def freeze_heap() -> None:
    """Collect, then freeze what is left: forked children share the heap instead of copying it at each collection."""
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()


def other_threads() -> list[str]:
    """Names of the Python threads besides the main one: a fork gets none of them, and keeps the locks they held."""
    return [t.name for t in threading.enumerate() if t is not threading.main_thread()]


def run_forked(body: Callable[[], Any], close: list) -> None:
    """Run ``body`` in a fresh fork and never return into the caller's code; its exit code says how it ended."""
    code = 1
    try:
        for other in close:
            other.close()
        body()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except (BrokenPipeError, ConnectionResetError):
        pass  # the caller went away (killed, or its xdist controller was): nothing to report to
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)

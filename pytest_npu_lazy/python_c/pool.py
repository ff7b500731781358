"""The calling process's run_python zygotes: started on demand, matched by preload and environment, stopped at the end.

A pool exists while a pytest session with this plugin is active in this
process (the plugin calls :func:`activate` and :func:`deactivate`); without
one, run_python is plain ``subprocess.run``. A process forked from the one
that activated the pool (an isolated test's child) gets a pool of its own:
it never writes to zygotes another process talks to.

A zygote is a ``python -c <boot.py>`` started with the environment and
working directory of the first call that needs it, in a session of its own
(a terminal's Ctrl-C goes to pytest, which stops the code it waits for).
It serves any later call with the same preload whose environment agrees on
every variable :mod:`.env` names; with PYTHONPATH
entries that are relative, also the same working directory. At most
:data:`MAX_ZYGOTES` live at once, the least recently used goes first.

Runs in the pytest process: standard library only, no pytest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .env import as_started, compatible, relative_pythonpath, startup_changes
from . import messages
from ..errors import NpuLazyWarning, RunPythonError
from ..forks.processes import threads_warning, wait_or_kill_group, wait_status
from ..forks.channel import Channel, ChannelClosed, describe_status
from ..forks.server import READY_TIMEOUT

BOOT = Path(__file__).with_name("boot.py")
PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)  # the top package: boot.py loads it under an alias
#: importing a preload such as torch takes seconds; a hung one must not hang the session
MAX_ZYGOTES = 4  # a zygote holding torch takes a few hundred MB
STOP_GRACE = 5.0


@dataclass
class Zygote:
    preload: tuple[str, ...]
    env: dict[str, str]
    directory: str
    process: subprocess.Popen
    control: Channel
    ready: messages.CodeZygoteReady | None = None
    replay: tuple[bytes, bytes] = (b"", b"")  # what the preload printed on stdout and stderr
    failure: str | None = None  # why this zygote serves nothing (its calls run as plain subprocesses)
    last_used: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def label(self) -> str:
        return f"run_python zygote (pid {self.process.pid}, preload {list(self.preload)})"

    def serves(self, preload: tuple[str, ...], env: dict[str, str], directory: str) -> bool:
        """Whether a call may use this zygote (or, for a failed one, would fail the same way)."""
        if preload != self.preload:
            return False
        if relative_pythonpath(env) and directory != self.directory:
            return False
        return compatible(self.env, env, self.ready.reads if self.ready else ())

    def environ_for(self, env: dict[str, str]) -> dict[str, str]:
        """What os.environ must be in a child: ``env`` plus what `python -c` start-up adds (LC_CTYPE)."""
        assert self.ready is not None, "calls get only a ready zygote (ZygotePool.zygote)"
        return as_started(env, startup_changes(self.env, self.ready.environ))

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message, fds) -> None:
        with self.lock:
            messages.send(self.control, message, fds)
        self.last_used = time.monotonic()

    def stop(self) -> None:
        try:
            with self.lock:
                messages.send(self.control, messages.Shutdown())
        except OSError:
            pass
        self.control.close()
        wait_or_kill_group(self.process, STOP_GRACE, self.process.pid)  # its own session: the group is the zygote's


def _start(preload: tuple[str, ...], env: dict[str, str], directory: str) -> Zygote:
    """Start a zygote and wait for its preload; Popen's own errors (a missing cwd) reach the caller."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", BOOT.read_text(encoding="utf-8"), PACKAGE_DIR, str(theirs.fileno()), *preload],
            env=env, cwd=directory, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            pass_fds=[theirs.fileno()], start_new_session=True)
    except BaseException:
        ours.close()
        out.close()
        err.close()
        raise
    finally:
        theirs.close()
    zygote = Zygote(preload, dict(env), directory, process, Channel(ours))
    try:
        with out, err:
            zygote.ready, zygote.failure = _wait_ready(zygote, err)
            out.seek(0)
            err.seek(0)
            zygote.replay = (out.read(), err.read())
    except BaseException:  # interrupted while the preload ran
        zygote.stop()
        raise
    if zygote.failure is not None:
        zygote.stop()
    return zygote


def _wait_ready(zygote: Zygote, err) -> tuple[messages.CodeZygoteReady | None, str | None]:
    label = f"the run_python zygote for preload {list(zygote.preload)}"
    try:
        ready, _ = messages.FROM_ZYGOTE.receive(zygote.control, READY_TIMEOUT)
    except ChannelClosed:
        zygote.process.wait()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace").strip()
        return None, (f"{label} ended with {describe_status(wait_status(zygote.process.returncode))} "
                      f"before its preload finished" + (f":\n{stderr}" if stderr else ""))
    if ready is None:
        return None, f"{label} did not finish its preload within {READY_TIMEOUT:.0f} s"
    if ready.error:
        return ready, f"{label} could not import it:\n{ready.error}"
    if ready.hazard:
        return ready, f"{label} cannot fork: {ready.hazard}"
    return ready, None


class Pool:
    """The zygotes of one process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.zygotes: list[Zygote] = []
        self.failed: list[Zygote] = []
        self.lock = threading.Lock()
        self.warned: set[str] = set()

    def zygote(self, preload: tuple[str, ...], env: dict[str, str], directory: str) -> Zygote | None:
        """A ready zygote for this call, or None when such calls must run as plain subprocesses."""
        with self.lock:
            if any(failed.serves(preload, env, directory) for failed in self.failed):
                return None
            for zygote in self.zygotes:
                if zygote.serves(preload, env, directory) and zygote.alive():
                    zygote.last_used = time.monotonic()
                    return zygote
            self.zygotes = [z for z in self.zygotes if z.alive()]
            zygote = _start(preload, env, directory)
            if zygote.failure is not None:
                self.failed.append(zygote)
                self.warn(zygote.failure + "\nrun_python runs these calls as plain subprocesses.")
                return None
            for stale in self._evict_for_one_more():
                stale.stop()
            self.zygotes.append(zygote)
            threads = threads_warning(f"the {zygote.label}", zygote.ready.threads if zygote.ready else [])
            if threads:
                self.warn(threads)
            return zygote

    def _evict_for_one_more(self) -> list[Zygote]:
        by_age = sorted(self.zygotes, key=lambda z: z.last_used)
        stale = by_age[: max(len(by_age) - MAX_ZYGOTES + 1, 0)]
        self.zygotes = [z for z in self.zygotes if z not in stale]
        return stale

    def warn(self, text: str, stacklevel: int = 4) -> None:
        """Once per text; the default stack level points at run_python's caller through zygote()."""
        if text not in self.warned:
            self.warned.add(text)
            warnings.warn(NpuLazyWarning(text), stacklevel=stacklevel)

    def forget(self, zygote: Zygote) -> None:
        """A zygote that died under a call: the next call starts a new one."""
        with self.lock:
            if zygote in self.zygotes:
                self.zygotes.remove(zygote)
        zygote.control.close()

    def shutdown(self) -> None:
        if os.getpid() != self.pid:
            return  # inherited through a fork: these zygotes belong to the process that started them
        with self.lock:
            zygotes, self.zygotes = self.zygotes, []
        for zygote in zygotes:
            zygote.stop()

    def abandon(self) -> None:
        """In a forked copy: close our copies of the parent's sockets, leave its zygotes alone."""
        for zygote in self.zygotes:
            zygote.control.close()
        self.zygotes = []


_ACTIVE: Pool | None = None
_OWNER: object | None = None


def activate(owner: object) -> None:
    """Called by the plugin when a session's configuration starts; nested sessions share the outer pool."""
    global _ACTIVE, _OWNER
    if _ACTIVE is None or _ACTIVE.pid != os.getpid():
        _ACTIVE, _OWNER = Pool(), owner


def deactivate(owner: object) -> None:
    global _ACTIVE, _OWNER
    if _ACTIVE is not None and _OWNER is owner and _ACTIVE.pid == os.getpid():
        pool, _ACTIVE, _OWNER = _ACTIVE, None, None
        pool.shutdown()


def active() -> Pool | None:
    """This process's pool, or None outside a pytest session with the plugin."""
    global _ACTIVE
    if _ACTIVE is not None and _ACTIVE.pid != os.getpid():
        _ACTIVE.abandon()
        _ACTIVE = Pool()
    return _ACTIVE


def error_for_dead(zygote: Zygote) -> RunPythonError:
    status = zygote.process.poll()
    how = "is still running" if status is None else f"ended with {describe_status(wait_status(status))}"
    return RunPythonError(f"the {zygote.label} stopped answering while it ran this call (it {how}); "
                          "the call's result is unknown. The next call starts a new zygote.")

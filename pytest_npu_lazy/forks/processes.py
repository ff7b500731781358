"""Process plumbing shared by zygotes and the pytest process: reaping, killing, and naming.

Every test child leads its own process group, so killing the group also
ends what the test started (Inductor compile workers, subprocesses): when
the test times out, and whatever is still running when the test ends.

Zygotes and children are forks of pytest, so ``ps`` would show each as
another ``python -m pytest``: :func:`set_title` names them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from types import ModuleType
from typing import Iterator

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


_LIBC = None


def libc():
    """The C library, loaded once (find_library would run ldconfig, tens of ms, in every caller)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, libc's among them
        if not hasattr(_LIBC, "prctl"):  # pragma: no cover - a static or unusual libc
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _LIBC


@contextlib.contextmanager
def _titles_within_argv() -> Iterator[None]:
    """setproctitle may claim the environment's memory for long titles, which empties /proc/PID/environ
    (where tools, and this project's tests, find processes); SPT_NOENV keeps it to the arguments' space."""
    had = "SPT_NOENV" in os.environ
    os.environ["SPT_NOENV"] = "1"
    try:
        yield
    finally:
        if not had:
            del os.environ["SPT_NOENV"]


with _titles_within_argv():
    _setproctitle: ModuleType | None
    try:  # optional: rewrites the command line that ps shows; without it only the short name changes
        import setproctitle as _setproctitle
    except ImportError:  # pragma: no cover - depends on the environment
        _setproctitle = None


_title_set_up = False


def _prctl(option: int, value) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc().prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - libc without prctl
        pass


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` when the parent process exits (no-op elsewhere)."""
    _prctl(_PR_SET_PDEATHSIG, int(sig))


def set_title(kind: str, detail: str) -> None:
    """Name this process ``pytest-npu-lazy <kind>: <detail>`` in ps, and ``npu-lazy <kind>`` in top and ps -e.

    The command line needs setproctitle (an optional dependency) and is cut
    to the length of the original arguments; the short name (15 bytes, prctl
    PR_SET_NAME) works without it.
    """
    global _title_set_up
    if _setproctitle is not None:
        if _title_set_up:  # setproctitle read SPT_NOENV when it set up, in this process or the one it forked from
            _setproctitle.setproctitle(f"pytest-npu-lazy {kind}: {detail}")
        else:
            with _titles_within_argv():
                _setproctitle.setproctitle(f"pytest-npu-lazy {kind}: {detail}")
            _title_set_up = True
    _prctl(_PR_SET_NAME, f"npu-lazy {kind}".encode()[:15])  # bytes pass as char *, NUL-terminated


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a process group, ignoring one that is already gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_or_kill_group(process, grace: float, pgid: int) -> None:
    """Give a ``subprocess.Popen`` that was told to end ``grace`` seconds, then kill its process group and reap
    it: a zygote or spawned child that hangs in its shutdown must not outlive the run."""
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        kill_group(pgid, signal.SIGKILL)
        process.wait()


def wait_or_kill(pid: int, grace: float = 5.0) -> None:
    """Give a forked child (not a ``Popen``) that was told to end ``grace`` seconds, then kill it and its group
    and reap it: the pytest process's root zygote must not outlive the session."""
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


def wait_status(returncode: int) -> int:
    """The ``os.waitpid`` status a ``Popen.returncode`` stands for (``-N``: killed by signal N), so a spawned
    process's end is described and reported as a forked one's is (:func:`~.channel.describe_status`)."""
    return -returncode if returncode < 0 else returncode << 8


def close_fd(fd: int) -> None:
    """Close a descriptor that may already be closed: one received, inherited or handed on, whose owner is
    unclear once an error cut a conversation short; a second close must not raise over the first error."""
    try:
        os.close(fd)
    except OSError:
        pass


def threads_warning(who: str, threads: list[str]) -> str | None:
    """What to tell a person when a process that forks children has threads besides the main one (None when
    it has none): a fork copies only the forking thread, so the children lack them and keep their locks held."""
    if not threads:
        return None
    return (f"{who} has {len(threads)} Python thread(s) besides the main one ({', '.join(threads)}) after its "
            "preload; forked children get none of them, and locks those threads held stay locked in the children.")


def _exited(pid: int) -> bool:
    """Whether a child has ended, without reaping it."""
    if not hasattr(os, "waitid"):  # pragma: no cover - no waitid: leftovers are killed at session end
        return False
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False


class ChildWatcher:
    """Reaps children of this process and says how each one ended.

    With pidfds (Linux 5.3+) an exit wakes ``select`` at once; elsewhere
    callers poll with a short timeout.
    """

    def __init__(self) -> None:
        self._pidfds: dict[int, int] = {}  # pid -> pidfd, or -1 without pidfd support
        self.exited: dict[int, int] = {}  # pid -> wait status, not yet taken

    def add(self, pid: int) -> None:
        try:
            self._pidfds[pid] = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfds[pid] = -1

    @property
    def pids(self) -> list[int]:
        return list(self._pidfds)

    def fds(self) -> list[int]:
        return [fd for fd in self._pidfds.values() if fd >= 0]

    @property
    def needs_polling(self) -> bool:
        return any(fd < 0 for fd in self._pidfds.values())

    def reap(self) -> Iterator[tuple[int, int]]:
        """Children that ended, after killing what each left running in its process group."""
        for pid, pidfd in list(self._pidfds.items()):
            if _exited(pid):
                # Until it is reaped, the dead leader holds its pid, so no other group can have taken this one.
                kill_group(pid, signal.SIGKILL)
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                if pidfd >= 0:
                    os.close(pidfd)
                del self._pidfds[pid]
                yield pid, status

    def kill(self, pid: int, sig: int = signal.SIGKILL, group: bool = True) -> None:
        """Signal a watched child and, with ``group``, its whole group: not reaped yet, its pid names no other."""
        if group:
            kill_group(pid, sig)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def kill_all(self, sig: int = signal.SIGKILL, groups: bool = True) -> None:
        for pid in self.pids:
            self.kill(pid, sig, groups)

    def wait_all(self) -> list[tuple[int, int]]:
        ended = []
        for pid in self.pids:
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                status = 0
            pidfd = self._pidfds.pop(pid)
            if pidfd >= 0:
                os.close(pidfd)
            ended.append((pid, status))
        return ended


def fork_hazard() -> str | None:
    """Why forking this process now would hand children a broken device runtime (callers add the remedy)."""
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and getattr(cuda, "is_initialized", lambda: False)():
        return "CUDA was initialised in the zygote (a preload module touched the GPU); a forked child cannot use it"
    npu = sys.modules.get("torch_npu.npu")
    if npu is not None and getattr(npu, "is_initialized", lambda: False)():
        return ("the NPU runtime was initialised in the zygote (a preload module touched the NPU); a forked "
                "child cannot use it")
    return None

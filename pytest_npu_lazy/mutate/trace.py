"""The coverage pass's probe: which target functions ran, in which process, when.

:func:`operators.instrument` puts ``hit("<qualified name>")`` first in every
target function. Each call appends ``<CLOCK_MONOTONIC seconds> <in a test> <name>``
to a file of this process in the plan's log folder; the runner places each
line in the test whose window (timed in the pytest process with the same
clock, which Linux shares between processes) holds it. "In a test" is
whether ``PYTEST_CURRENT_TEST`` is set: a zygote started during a test's
window preloads for every later test too, so its hits belong to none. A process writes a name
once per test it runs in (``PYTEST_CURRENT_TEST``), so a hot function costs
one line, not one per call; a fork forgets what its parent wrote.
"""

from __future__ import annotations

import os
import time

_written: set[tuple[str, str | None]] = set()
_fd: int | None = None
_fd_pid = 0


def _forget_after_fork() -> None:
    global _fd, _written
    _fd, _written = None, set()


os.register_at_fork(after_in_child=_forget_after_fork)


def hit(name: str) -> None:
    global _fd, _fd_pid
    key = (name, os.environ.get("PYTEST_CURRENT_TEST"))
    if key in _written:
        return
    _written.add(key)
    from .hook import active_plan

    plan = active_plan()
    if plan is None or not plan.log_dir:
        return
    if _fd is None or _fd_pid != os.getpid():
        _fd = os.open(os.path.join(plan.log_dir, f"hits-{os.getpid()}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _fd_pid = os.getpid()
    in_test = 1 if key[1] else 0  # a zygote's preload runs with no test current, whatever window it falls in
    os.write(_fd, f"{time.monotonic():.6f} {in_test} {name}\n".encode())

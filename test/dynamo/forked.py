"""A check run in a child forked from the test's process, its verdict read back through a pipe.

For guarantees about what a fork inherits (run-once state, locks held by
threads the fork does not copy): the child answers "ok" or what went wrong,
and always exits, so a broken guarantee fails the test instead of hanging it
or leaving a process behind.
"""

from __future__ import annotations

import os
from typing import Callable


def verdict_of_forked_child(check: Callable[[], str], *, meanwhile: Callable[[], None] | None = None
                            ) -> tuple[str, int]:
    """Fork; the child runs ``check`` (its return value, or the exception it raised, is the verdict) and exits.
    The parent runs ``meanwhile`` (say, release a lock the child waits for), reads the verdict, reaps the child
    and returns (verdict, wait status)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        verdict = "no verdict"
        try:
            verdict = check()
        except BaseException as exc:
            verdict = repr(exc)
        finally:
            os.write(write_end, verdict.encode(errors="replace"))
            os._exit(0)
    os.close(write_end)
    try:
        if meanwhile is not None:
            meanwhile()
    finally:
        with os.fdopen(read_end, "rb") as pipe:
            verdict_bytes = pipe.read()
        _, status = os.waitpid(pid, 0)
    return verdict_bytes.decode(errors="replace"), status

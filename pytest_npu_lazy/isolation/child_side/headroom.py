"""Run a test with headroom on CPython's frame stack, so that no hot loop straddles one of its chunk boundaries.

CPython (3.11 and later) keeps each thread's Python frames on a data stack allocated in chunks: 16 KiB at first,
mapped with ``mmap``, and unmapped as soon as the first frame in a chunk returns (``_PyThreadState_PopFrame``). A
loop whose calls cross a chunk boundary maps and unmaps 16 KiB at each call. Where a boundary falls depends on
how deep the test runs: under pytest-xdist an isolated test runs some frames deeper than without, and one of
compute mode's tests (an interpreted Triton kernel, many thousands of Python calls a loop iteration) landed on a
boundary there: 75 s, and 12 s without xdist (test/npu_kernels/test_loops.py's prime case, 2 cores; about
16,000 mmap/munmap pairs a second).

A frame larger than a chunk gets a chunk of its own, the next power of two above it. :func:`with_headroom` calls
the test from a frame of about 512 KiB (its code's stack size raised, which costs nothing: the stack is never
used), whose chunk is 1 MiB, so the test's own frames stack up in the other 512 KiB, far deeper than any test
goes, and the boundary is never crossed while it runs.
"""

from __future__ import annotations

import sys
from typing import Callable, TypeVar

T = TypeVar("T")

#: slots (pointers) of the calling frame: 64 Ki and a little, so its chunk is the next power of two (1 MiB) and
#: half of that chunk is left for what it calls
HEADROOM_SLOTS = 65_636


def _call(run: Callable[[], T]) -> T:
    return run()


if sys.implementation.name == "cpython" and sys.version_info >= (3, 11):
    _call.__code__ = _call.__code__.replace(co_stacksize=HEADROOM_SLOTS)


def with_headroom(run: Callable[[], T]) -> T:
    """``run()``, called from the frame with headroom (the module docstring says why)."""
    return _call(run)

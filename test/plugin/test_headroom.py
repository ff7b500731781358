"""An isolated test runs with headroom on CPython's frame stack (pytest_npu_lazy/isolation/child_side/headroom.py).

A loop whose calls cross one of the frame stack's chunk boundaries maps and unmaps a chunk at every call; each
mapping's first touch is a page fault, which ``getrusage`` counts exactly. So: descend frame by frame over more
than a chunk's worth of frames, and at each depth run a loop of calls. Without headroom some depth crosses a
boundary, a fault a call; with it, none does.
"""

from __future__ import annotations

import sys

import pytest

CALLS = 2000


def _leaf() -> None:
    return None


def _worst_depth() -> int:
    """The most page faults a loop of CALLS calls took, over every depth from here to about two chunks deeper."""
    import resource

    worst = 0

    def descend(depth: int) -> None:
        nonlocal worst
        if depth:
            descend(depth - 1)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(CALLS):
            _leaf()
        worst = max(worst, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)

    for start in range(40):  # a frame of descend is some slots wide: start deeper by one frame at a time
        descend(start * 10)
    return worst


@pytest.mark.skipif(not sys.platform.startswith("linux") or sys.implementation.name != "cpython"
                    or sys.version_info < (3, 11), reason="needs CPython 3.11+ on Linux (its frame stack in chunks)")
def test_a_loop_on_a_chunk_boundary_maps_no_chunk_with_headroom():
    from pytest_npu_lazy.isolation.child_side.headroom import with_headroom

    without = _worst_depth()
    assert without >= CALLS // 2, f"no depth crossed a chunk boundary ({without} faults): the premise does not hold here"
    within = with_headroom(_worst_depth)
    assert within < CALLS // 10, f"with headroom a loop still took {within} page faults: a chunk was mapped per call"


def test_with_headroom_returns_what_it_ran_and_raises_what_it_raised():
    from pytest_npu_lazy.isolation.child_side.headroom import with_headroom

    assert with_headroom(lambda: 42) == 42
    with pytest.raises(KeyError):
        with_headroom(lambda: {}["missing"])

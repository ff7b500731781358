"""test/dynamo: torch_npu's deferred-loading guarantees.

This conftest is imported in the pytest process before zygotes fork, so it
imports neither torch nor torch_npu; the tests import them inside their
isolated children.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # facts and regressions, for the tests and the zoo
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # test/breakage.py, shared by both suites

from ci_variable import without_ci_variable  # noqa: E402,F401 (an autouse fixture, for every test here)
from regressions import ENV, REGRESSIONS  # noqa: E402

# Inductor compiles in-process, without its pool of compile-worker subprocesses: starting that pool costs
# every first compiled call about 1.5 s here (a fresh interpreter importing torch), in a process outside the
# one whose imports the suite checks. Set TORCHINDUCTOR_COMPILE_THREADS yourself to check with the pool.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


@pytest.fixture(autouse=True)
def injected_regression():
    """Re-create a known regression in this (isolated) test when the zoo asks for one."""
    name = os.environ.get(ENV)
    if name:
        if name not in REGRESSIONS:
            raise pytest.UsageError(f"{ENV}={name!r}: no such regression; known: {', '.join(REGRESSIONS)}")
        REGRESSIONS[name]()
    yield name

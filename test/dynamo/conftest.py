"""test/dynamo: torch_npu's deferred-loading guarantees.

This conftest is imported in the pytest process before zygotes fork, so it
imports neither torch nor torch_npu; the tests import them inside their
isolated children.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # facts and regressions, for the tests and the zoo
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # test/breakage.py, shared by both suites

from ci_variable import without_ci_variable  # noqa: F401 (an autouse fixture, for every test here)
from regressions import ENV, REGRESSIONS

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


def _torch_npu_import_error() -> str | None:
    """Why ``import torch_npu`` fails in a fresh interpreter of this environment, or None where it imports."""
    done = subprocess.run([sys.executable, "-c", "import torch_npu"], capture_output=True, text=True, timeout=600)
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--npu-lazy-cann=off`` nothing stands in for CANN: where none is installed, ``import torch_npu``
    fails, and every guarantee here is about what importing torch_npu and compiling load. Each test then skips
    once, saying why and what to run instead, rather than failing 300 times with the same ImportError. Where
    CANN is in the environment (its set_env.sh sourced), torch_npu imports and the suite runs as usual. Asked only
    in off mode (the plugin exports the mode it activated), of a fresh interpreter: never imported here."""
    if os.environ.get("PYTEST_NPU_LAZY_CANN") != "off" or not items:  # each xdist worker collects
        return
    error = _torch_npu_import_error()
    if error is None:
        return
    skip = pytest.mark.skip(reason=(
        f"needs `import torch_npu` to work, and under --npu-lazy-cann=off it fails here ({error[:200]}): "
        "test/dynamo checks what importing torch_npu loads; run it with --npu-lazy-cann=auto, stub, emulate or "
        "compute, or source CANN's set_env.sh"))
    for item in items:
        item.add_marker(skip)

"""test/npu_kernels: compiled kernels on the NPU equal eager, op by op, the way torch_npu tests its Inductor backend.

Tensors are made on the ``npu`` device, the eager result is computed there too, and the compiled
one must equal it. They run where the device computes: a real NPU, or the emulated NPU under
``--npu-lazy-cann=compute`` (eager operators by ATen's CPU kernels on the device's host memory,
torch_npu's Triton kernels in Triton's interpreter); on the host stub and the plain emulation
they skip, saying why. Every test is isolated (module zygotes fork them), so each compiles in a
process of its own, and this conftest imports neither torch nor torch_npu.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # testutils and ops, for the tests
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # test/ci_variable.py, shared with test/dynamo

from ci_variable import without_ci_variable  # noqa: F401 (an autouse fixture, for every test here)

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # as test/dynamo: no compile-worker pool


@pytest.fixture(autouse=True)
def seeded():
    """The same inputs on every run: a verdict never depends on a random draw (each test is its own process)."""
    import torch

    torch.manual_seed(0)

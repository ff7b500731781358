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

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # as test/dynamo: no compile-worker pool


@pytest.fixture(autouse=True)
def without_ci_variable(monkeypatch):
    """Stock torch's ``make_fallback`` turns into an assertion where ``CI`` is set (any CI system sets it), and
    torch_npu's Triton backend trips it for gelu on a device (facts.ci_variable_breaks_gelu_fallback, pinned by
    test/dynamo/test_first_call.py::test_ci_variable_breaks_a_cold_gelu_compile_on_a_device): the suite's
    verdicts must not depend on whether the runner sets it, so each test runs without it unless it sets it."""
    monkeypatch.delenv("CI", raising=False)

"""The ``CI`` variable kept out of the isolated tests of test/dynamo and test/npu_kernels (both conftests import this).

Stock torch's ``make_fallback`` turns into an assertion where ``CI`` is set (any CI system sets it), and torch_npu's
Triton backend trips it for gelu on a device (``facts.ci_variable_breaks_gelu_fallback``, pinned by
test/dynamo/test_first_call.py::test_ci_variable_breaks_a_cold_gelu_compile_on_a_device): the suites' verdicts must
not depend on whether the runner sets it, so each test runs without it unless it sets it itself. test/plugin keeps
it: its browser tests read it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def without_ci_variable(monkeypatch):
    monkeypatch.delenv("CI", raising=False)

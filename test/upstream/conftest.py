"""test/upstream: the guarantees of stock PyTorch that torch_npu relies on, checked with plain torch.

Imported in the pytest process before zygotes fork: it imports neither torch
nor triton (nor torch_npu, which this suite never needs).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # releases.py, for the tests
sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # test/breakage.py, shared by both suites

# As in test/dynamo: Inductor compiles in the test's own process, not in a pool of compile workers
# (which would cost every first call a fresh interpreter importing torch, outside the process checked).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest

#: set to 1, every isolated test here runs with triton made absent, as on the day upstream stops importing it
#: at wrapper creation: test/plugin/test_upstream_flip.py shows the strict xfail then failing the run
UPSTREAM_FIXED = "NPU_LAZY_UPSTREAM_TRITON_FIXED"


@pytest.fixture(autouse=True)
def upstream_stopped_loading_triton(request):
    if os.environ.get(UPSTREAM_FIXED) == "1":
        request.getfixturevalue("npu_lazy").block("triton")
    yield

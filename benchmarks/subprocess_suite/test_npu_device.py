"""Guarantee 8 (test/dynamo/test_npu_device.py): the code string itself decides it needs an NPU and skips."""

from __future__ import annotations

from .conftest import SKIP, check

NEEDS_NPU = f"""
import torch
import torch_npu
from torch_npu.utils._dynamo import _lazy_inductor_setup
if not torch.npu.is_available():
    print("needs a real NPU device")
    sys.exit({SKIP})
"""


def test_first_call_on_npu_tensors_matches_eager():
    check(NEEDS_NPU + """
f = lambda x: torch.sin(x) * 2 + x
fn = torch.compile(f, backend="inductor")
assert not loaded("torch_npu._inductor")
x = torch.randn(64, device="npu")
torch.testing.assert_close(fn(x), f(x))
assert "torch_npu._inductor" in sys.modules
assert _lazy_inductor_setup.has_run
""")


def test_npugraphs_backend_runs_and_matches_eager():
    check(NEEDS_NPU + """
f = lambda x: torch.relu(x) + 1
fn = torch.compile(f, backend="npugraphs")
x = torch.randn(32, device="npu")
torch.testing.assert_close(fn(x), f(x))
torch.testing.assert_close(fn(x), f(x))
assert _lazy_inductor_setup.has_run
""")

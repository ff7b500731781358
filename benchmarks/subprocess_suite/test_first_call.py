"""Guarantee 4 (test/dynamo/test_first_call.py), one process per test."""

from __future__ import annotations

import pytest

from .conftest import check

SETUP = """
import torch
import torch_npu
from torch_npu.utils._dynamo import _lazy_inductor_setup
"""

FIRST_CALL = SETUP + """
f = lambda x: torch.sin(x) + 1
fn = torch.compile(f, backend="inductor")
assert not loaded("torch_npu._inductor")
x = torch.randn(8, device=device())
torch.testing.assert_close(fn(x), f(x))
assert "torch_npu._inductor" in sys.modules
assert _lazy_inductor_setup.has_run
"""

OPS = {
    "sin_cos": ("lambda x: torch.sin(x) * torch.cos(x)", "torch.float32", (64,)),
    "softmax": ("lambda x: torch.softmax(x, dim=-1)", "torch.float32", (4, 33)),
    "matmul_relu": ("lambda x: torch.relu(x @ x.T)", "torch.float32", (8, 8)),
    "sum_keepdim": ("lambda x: x.sum(dim=1, keepdim=True) - x", "torch.float64", (3, 5, 7)),
    "bf16_gelu": ("lambda x: torch.nn.functional.gelu(x)", "torch.bfloat16", (2, 16)),
    "int_where": ("lambda x: torch.where(x > 0, x * 2, -x)", "torch.int64", (32,)),
}


def matches_eager_code(name: str) -> str:
    fn, dtype, shape = OPS[name]
    return SETUP + f"""
f = {fn}
dtype, shape = {dtype}, {shape!r}
x = (torch.randn(shape) * 4).to(dtype) if dtype.is_floating_point else torch.randint(-9, 9, shape, dtype=dtype)
x = x.to(device())
compiled = torch.compile(f, backend="inductor")
torch.testing.assert_close(compiled(x), f(x))
"""


def test_first_call_sets_up_npu_inductor():
    check(FIRST_CALL)


@pytest.mark.parametrize("name", list(OPS))
def test_compiled_matches_eager(name):
    check(matches_eager_code(name))


def test_dynamic_shapes_match_eager():
    check(SETUP + """
f = lambda x: torch.tanh(x).cumsum(0)
compiled = torch.compile(f, backend="inductor", dynamic=True)
assert not loaded("torch_npu._inductor")
for length in (5, 11, 29):
    x = torch.randn(length, device=device())
    torch.testing.assert_close(compiled(x), f(x))
assert "torch_npu._inductor" in sys.modules
""")


def test_small_module_matches_eager():
    check(SETUP + """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
model = model.to(device())
compiled = torch.compile(model, backend="inductor")
with torch.no_grad():
    x = torch.randn(3, 16, device=device())
    torch.testing.assert_close(compiled(x), model(x))
assert _lazy_inductor_setup.has_run
""")


def test_second_call_loads_nothing_new():
    check(SETUP + """
f = lambda x: x.exp() - 1
compiled = torch.compile(f, backend="inductor")
x = torch.randn(16, device=device())
torch.testing.assert_close(compiled(x), f(x))
after_first_call = set(sys.modules)
compiled(x)
compiled(x)
assert set(sys.modules) == after_first_call, sorted(set(sys.modules) - after_first_call)
""")

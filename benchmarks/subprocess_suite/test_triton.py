"""Guarantee 5 (test/dynamo/test_triton.py), one process per test."""

from __future__ import annotations

import pytest
from facts import (
    ASCEND_TRITON,
    stock_torch_loads_triton_at_wrap,
    triton_ascend_extension_loads_with_triton,
    triton_installed,
)

from .conftest import check

TORCH_LOADS_TRITON = stock_torch_loads_triton_at_wrap()


def test_triton_modules_by_phase_are_explained():
    check(f"""
    import torch
    import torch_npu
    before_wrap = set(loaded("triton"))
    f = lambda x: torch.sigmoid(x) * x
    fn = torch.compile(f, backend="inductor")
    after_wrap = set(loaded("triton"))
    x = torch.randn(32, device=device())
    torch.testing.assert_close(fn(x), f(x))
    after_call = set(loaded("triton"))
    by_phase = {{"wrap": len(after_wrap - before_wrap), "first_call": len(after_call - after_wrap)}}
    print("triton modules by phase:", by_phase)
    if not {triton_installed()!r}:
        assert not after_call
    else:
        assert not before_wrap
        assert "triton" in after_call
    """)


@pytest.mark.xfail(TORCH_LOADS_TRITON is not None, reason=TORCH_LOADS_TRITON or "", strict=True)
def test_wrapper_creation_does_not_load_triton():
    check("""
    import torch
    import torch_npu
    torch.compile(lambda x: x + 1, backend="inductor")
    assert not loaded("triton")
    """)


TRITON_HELPERS = """
import torch
import torch_npu
f = lambda x: x * x
fn = torch.compile(f, backend="inductor")
assert not loaded("torch_npu._inductor.runtime.triton_helpers")
x = torch.randn(8, device=device())
torch.testing.assert_close(fn(x), f(x))
"""


def test_npu_triton_helpers_wait_for_the_first_call():
    check(TRITON_HELPERS)


@pytest.mark.xfail(
    TORCH_LOADS_TRITON is not None and triton_ascend_extension_loads_with_triton(),
    reason=f"triton-ascend's `import triton` executes triton.language.extra.ascend, and {TORCH_LOADS_TRITON}",
    strict=True)
def test_ascend_triton_extension_waits_for_the_first_call():
    check(f"""
    import torch
    import torch_npu
    torch.compile(lambda x: x - 1, backend="inductor")
    for name in {ASCEND_TRITON!r}:
        assert not loaded(name), name
    """)

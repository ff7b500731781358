"""Guarantees 2 and 3 (test/dynamo/test_wrapper.py), one process per test."""

from __future__ import annotations

import pytest
from facts import WRAPPER_KWARGS

from .conftest import check


def wrapper_code(kwargs: dict) -> str:
    return f"""
import torch
import torch_npu
from torch_npu.utils._dynamo import _lazy_dynamo_setup, _lazy_inductor_setup
assert not loaded("torch._dynamo")
torch.compile(lambda x: x + 1, backend="inductor", **{kwargs!r})
assert not loaded("torch_npu._inductor")
assert not _lazy_inductor_setup.has_run
assert _lazy_dynamo_setup.has_run
assert "torch._dynamo" in sys.modules
"""


@pytest.mark.parametrize("kwargs", WRAPPER_KWARGS.values(), ids=WRAPPER_KWARGS.keys())
def test_wrapper_runs_dynamo_setup_only(kwargs):
    check(wrapper_code(kwargs))


def test_wrapper_without_triton():
    check("""
    sys.modules["triton"] = None  # triton looks absent: import fails, find_spec is None
    import torch
    import torch_npu
    from torch_npu.utils._dynamo import _lazy_inductor_setup
    f = lambda x: torch.cos(x) * 3
    fn = torch.compile(f, backend="inductor")
    assert not loaded("triton")
    assert not loaded("torch_npu._inductor")
    assert not _lazy_inductor_setup.has_run
    x = torch.randn(8, device=device())
    torch.testing.assert_close(fn(x), f(x))
    assert "torch_npu._inductor" in sys.modules
    assert not loaded("triton")
    """)


def test_wrapper_with_triton_lacking_the_ascend_extension():
    check("""
    for name in ("triton.language.extra.ascend", "triton.backends.ascend"):
        sys.modules[name] = None  # looks absent
    import torch
    import torch_npu
    from torch_npu.utils._dynamo import _lazy_inductor_setup
    torch.compile(lambda x: x * 2, backend="inductor")
    assert not _lazy_inductor_setup.has_run
    for name in ("torch_npu._inductor", "triton.language.extra.ascend", "triton.backends.ascend"):
        assert not loaded(name), name
    """)

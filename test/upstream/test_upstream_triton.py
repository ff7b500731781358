"""Triton at wrapper creation: a strict, per-release expectation, and every module that asks for it."""

from __future__ import annotations

import sys

import pytest
from releases import (
    MEASURED,
    TRITON_ASKERS_AT_WRAP,
    TritonRefused,
    torch_line,
    triton_at_wrap_reason,
    triton_importable,
)

pytestmark = pytest.mark.npu_lazy(preload=["torch"])

TRITON_AT_WRAP = triton_at_wrap_reason()


@pytest.mark.skipif(not triton_importable(), reason="needs triton installed: without it nothing can load it")
@pytest.mark.xfail(TRITON_AT_WRAP is not None, reason=TRITON_AT_WRAP or "", strict=True)
def test_wrapper_creation_does_not_load_triton(npu_lazy):
    npu_lazy.compile(lambda x: x + 1, backend="inductor")
    npu_lazy.assert_not_loaded("triton")


@pytest.mark.skipif(not triton_importable(), reason="needs triton installed: without it nothing can load it")
def test_triton_at_wrapper_creation_comes_from_dynamo_utils(npu_lazy, record_property):
    """Where triton is loaded at wrapper creation, the chain names the known first asker."""
    npu_lazy.compile(lambda x: x - 1, backend="inductor")
    if not npu_lazy.loaded("triton"):
        assert TRITON_AT_WRAP is None, f"triton did not load, but this release is expected to: {TRITON_AT_WRAP}"
        return
    chain = npu_lazy.import_chain("triton")
    record_property("triton_chain", " <- ".join(chain))
    record_property("triton_modules_at_wrap", len(npu_lazy.loaded("triton")))
    names = [link.split(" (", 1)[0] for link in chain]
    assert "torch._dynamo.utils" in names, f"triton now loads through something else:\n{npu_lazy.explain('triton')}"


def test_modules_asking_for_triton_at_wrapper_creation(npu_lazy, record_property):
    """With every triton import refused, the modules that ask while the wrapper is created: all of them
    must stop asking before wrapper creation can leave triton unloaded."""
    refused = TritonRefused()
    sys.meta_path.insert(0, refused)
    try:
        npu_lazy.compile(lambda x: x * 3, backend="inductor", check_eager=False)
    finally:
        sys.meta_path.remove(refused)
    asked = set(refused.askers)
    record_property("askers", {name: refused.askers[name] for name in sorted(asked)})
    line = torch_line()
    if line in TRITON_ASKERS_AT_WRAP:
        expected = TRITON_ASKERS_AT_WRAP[line]
        assert asked == expected, (f"torch {line}: new askers {sorted(asked - expected)}, gone "
                                   f"{sorted(expected - asked)} (measured: {sorted(expected)})")
    else:  # newer than measured: what it does differently is news, whichever way
        known = set().union(*TRITON_ASKERS_AT_WRAP.values())
        assert asked <= known, f"torch {line}, newer than {MEASURED[-1]}: new askers {sorted(asked - known)}"

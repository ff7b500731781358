"""Guarantee 5: where each Triton module loads, and why; Ascend Triton code waits for the first call."""

from __future__ import annotations

import pytest
from facts import (
    ASCEND_TRITON,
    needs_deferred_setup,
    present,
    stock_torch_loads_triton_at_wrap,
    triton_ascend_extension_loads_with_triton,
    triton_installed,
)

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

TORCH_LOADS_TRITON = stock_torch_loads_triton_at_wrap()


def test_triton_modules_by_phase_are_explained(npu_lazy, record_property):
    """A report, and a check that every Triton module that loads can be traced to its cause."""
    import torch

    fn = npu_lazy.compile(lambda x: torch.sigmoid(x) * x, backend="inductor")
    fn(torch.randn(32, device=npu_lazy.device))
    by_phase: dict[str, int] = {}
    for name in npu_lazy.loaded("triton"):
        phase = npu_lazy.first_loaded(name)
        by_phase[phase] = by_phase.get(phase, 0) + 1
    record_property("triton_modules_by_phase", by_phase)
    if not triton_installed():
        assert by_phase == {}
        return
    first = npu_lazy.import_chain("triton")
    record_property("triton_chain", " <- ".join(first))
    print(npu_lazy.explain("triton"))
    assert first[0] == "triton" and len(first) > 1, "triton loaded, but nothing explains why"
    assert set(by_phase) <= {"wrap", "first_call"}


@pytest.mark.xfail(TORCH_LOADS_TRITON is not None, reason=TORCH_LOADS_TRITON or "", strict=True)
def test_wrapper_creation_does_not_load_triton(npu_lazy):
    npu_lazy.compile(lambda x: x + 1, backend="inductor")
    npu_lazy.assert_not_loaded("triton")


def test_npu_triton_helpers_wait_for_the_first_call(npu_lazy):
    import torch

    fn = npu_lazy.compile(lambda x: x * x, backend="inductor")
    npu_lazy.assert_not_loaded("torch_npu._inductor.runtime.triton_helpers")
    fn(torch.randn(8, device=npu_lazy.device))
    phase = npu_lazy.first_loaded("torch_npu._inductor.runtime.triton_helpers")
    assert phase in (None, "first_call")  # None where torch_npu's Triton backend stays off (no NPU)


@pytest.mark.xfail(
    TORCH_LOADS_TRITON is not None and triton_ascend_extension_loads_with_triton(),
    reason=f"triton-ascend's `import triton` executes triton.language.extra.ascend (triton/language/extra/"
           f"__init__.py loads every backend with exec_module), and {TORCH_LOADS_TRITON}",
    strict=True)
def test_ascend_triton_extension_waits_for_the_first_call(npu_lazy):
    installed = present(ASCEND_TRITON)  # upstream Triton has no Ascend extension at all
    assert "torch_npu._inductor.runtime.triton_helpers" in installed
    npu_lazy.compile(lambda x: x - 1, backend="inductor")
    npu_lazy.assert_not_loaded(*installed)

"""Guarantee 8: the same checks on a real NPU device; they skip, saying why, on the CANN host stub."""

from __future__ import annotations

import pytest
from facts import INDUCTOR_SETUP, needs_deferred_setup

pytestmark = [needs_deferred_setup, pytest.mark.requires_npu,
              pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]


def test_first_call_on_npu_tensors_matches_eager(npu_lazy):
    import torch

    assert npu_lazy.device == "npu"
    fn = npu_lazy.compile(lambda x: torch.sin(x) * 2 + x, backend="inductor")
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    fn(torch.randn(64, device="npu"))
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_call"
    assert npu_lazy.ran(INDUCTOR_SETUP)


def test_npugraphs_backend_runs_and_matches_eager(npu_lazy):
    import torch

    fn = npu_lazy.compile(lambda x: torch.relu(x) + 1, backend="npugraphs")
    x = torch.randn(32, device="npu")
    fn(x)
    torch.testing.assert_close(fn(x), torch.relu(x) + 1)
    assert npu_lazy.ran(INDUCTOR_SETUP)

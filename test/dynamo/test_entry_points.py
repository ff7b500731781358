"""Guarantee 6: other ways in (backend lists, entry points, torch.export) set up only what they need."""

from __future__ import annotations

from importlib import metadata

import pytest
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

NPU_BACKENDS = {"npu", "npugraph_ex", "npugraphs"}


def test_list_backends_after_dynamo_setup_without_inductor_setup(npu_lazy):
    import torch

    with npu_lazy.phase("dynamo"):
        import torch._dynamo
    assert npu_lazy.ran(DYNAMO_SETUP)
    with npu_lazy.phase("list"):
        backends = set(torch.compiler.list_backends())
    assert NPU_BACKENDS <= backends
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor")


def test_backend_entry_points_load_without_dynamo_or_inductor(npu_lazy):
    entry_points = [ep for ep in metadata.entry_points(group="torch_dynamo_backends")
                    if ep.dist is not None and ep.dist.name.replace("_", "-") == "torch-npu"]
    assert {ep.name for ep in entry_points} == NPU_BACKENDS
    with npu_lazy.phase("entry_points"):
        loaded = {ep.name: ep.load() for ep in entry_points}
    assert all(callable(backend) for backend in loaded.values())
    npu_lazy.assert_not_loaded("torch._dynamo", "torch._inductor", "torch_npu._inductor")


def test_export_initialises_only_dynamo(npu_lazy):
    import torch

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1

    x = torch.randn(4)
    with npu_lazy.phase("export"):
        exported = torch.export.export(Double(), (x,))
    assert npu_lazy.ran(DYNAMO_SETUP)
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    torch.testing.assert_close(exported.module()(x), Double()(x))

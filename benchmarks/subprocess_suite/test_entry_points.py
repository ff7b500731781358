"""Guarantee 6 (test/dynamo/test_entry_points.py), one process per test."""

from __future__ import annotations

from .conftest import check

NPU_BACKENDS = {"npu", "npugraph_ex", "npugraphs"}

PREAMBLE = """
import torch
import torch_npu
from torch_npu.utils._dynamo import _lazy_dynamo_setup, _lazy_inductor_setup
"""


def test_list_backends_after_dynamo_setup_without_inductor_setup():
    check(PREAMBLE + f"""
import torch._dynamo  # the post-import trigger runs the Dynamo setup
assert _lazy_dynamo_setup.has_run
backends = set(torch.compiler.list_backends())
assert {NPU_BACKENDS!r} <= backends, backends
assert not _lazy_inductor_setup.has_run
assert not loaded("torch_npu._inductor")
""")


def test_backend_entry_points_load_without_dynamo_or_inductor():
    check(PREAMBLE + f"""
from importlib import metadata
entry_points = [ep for ep in metadata.entry_points(group="torch_dynamo_backends")
                if ep.dist is not None and ep.dist.name.replace("_", "-") == "torch-npu"]
assert {{ep.name for ep in entry_points}} == {NPU_BACKENDS!r}
backends = {{ep.name: ep.load() for ep in entry_points}}
assert all(callable(backend) for backend in backends.values())
for name in ("torch._dynamo", "torch._inductor", "torch_npu._inductor"):
    assert not loaded(name), name
""")


def test_export_initialises_only_dynamo():
    check(PREAMBLE + """
class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1

x = torch.randn(4)
exported = torch.export.export(Double(), (x,))
assert _lazy_dynamo_setup.has_run
assert not _lazy_inductor_setup.has_run
assert not loaded("torch_npu._inductor")
torch.testing.assert_close(exported.module()(x), Double()(x))
""")

"""Guarantee 12: the npugraphs backend keeps its contract whichever backend set-up came first.

Its entry point takes Dynamo's generic keyword arguments without handing
them to the backend (which rejects options); its ``reset`` touches the NPU
graph trees only when they were loaded, and ``torch.compiler.reset()`` reaches
them; a first call runs the Dynamo set-up, then the Inductor set-up.
"""

from __future__ import annotations

import os
import sys
import types

import pytest
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup
from breakage import caught
from regressions import npugraphs_reset_imports_graph_trees

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

GRAPH_TREES = "torch_npu.npu._graph_tree"
ORDERS = ["npugraphs-first", "inductor-first"]


def test_entry_point_accepts_options_but_does_not_forward_them(npu_lazy, monkeypatch):
    from torch_npu.dynamo import _npugraphs_backend_entrypoint
    from torch_npu.utils import _dynamo, _graph_tree

    received = []
    monkeypatch.setattr(_dynamo, "_lazy_dynamo_setup", lambda: None)
    monkeypatch.setattr(_dynamo, "_lazy_inductor_setup", lambda: None)
    monkeypatch.setattr(_graph_tree, "npugraphs", lambda model, inputs, **kwargs: received.append(kwargs) or "graphs")
    graph, inputs = object(), [object()]
    assert _npugraphs_backend_entrypoint(graph, inputs, options={"npu_backend": "mlir"}) == "graphs"
    assert received == [{}], f"the entry point forwarded {received} to the npugraphs backend"
    with pytest.raises(TypeError, match="unexpected keyword argument 'options'"):
        _graph_tree.NpugraphsBackend()(graph, inputs, options={"npu_backend": "mlir"})
    npu_lazy.assert_not_loaded("torch_npu._inductor")


@pytest.mark.parametrize("order", ORDERS)
def test_reset_reaches_graph_trees_only_when_loaded(npu_lazy, monkeypatch, order):
    import torch

    if order == "inductor-first":
        npu_lazy.compile(lambda x: x + 1, backend="inductor", name="inductor")
    npu_lazy.compile(lambda x: x + 1, backend="npugraphs", name="npugraphs")
    from torch._dynamo.backends import registry
    from torch_npu.dynamo import _npugraphs_backend_entrypoint

    backend = registry._COMPILER_FNS["npugraphs"]
    assert backend is _npugraphs_backend_entrypoint, f"'npugraphs' is registered as {backend!r}"
    assert callable(getattr(backend, "reset", None))
    with npu_lazy.phase("reset"):
        backend.reset()
    npu_lazy.assert_not_loaded(GRAPH_TREES, "torch_npu._inductor")

    resets = []
    stand_in = types.ModuleType(GRAPH_TREES)
    stand_in.reset_npugraph_trees = lambda: resets.append("reset")
    monkeypatch.setitem(sys.modules, GRAPH_TREES, stand_in)
    torch.compiler.reset()
    assert resets == ["reset"], f"torch.compiler.reset() reset the NPU graph trees {len(resets)} times"
    assert not npu_lazy.ran(INDUCTOR_SETUP)


def test_first_npugraphs_call_sets_up_inductor_then_needs_the_device(npu_lazy):
    """On the host stub the chain runs up to the graph capture, which needs an NPU: the Inductor set-up
    ran in the first call and the error is the device's, not a missing set-up. Where a device answers
    (a real one, or the emulated NPU with CPU tensors) the call completes and matches eager. On the
    emulated NPU that computes, the tensors are on the device and the capture itself stops: the
    emulation models no graph capture (torch_npu looks up aclrtSetStreamAttribute, which it lacks)."""
    import torch

    from pytest_npu_lazy.cann.common import ENV_MODE

    with npu_lazy.phase("wrap"):
        compiled = torch.compile(lambda x: torch.sin(x) + 1, backend="npugraphs", fullgraph=True)
    assert npu_lazy.ran(DYNAMO_SETUP) and not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor", GRAPH_TREES)
    x = torch.randn(8, device=npu_lazy.device)
    with npu_lazy.phase("first_call"):
        if os.environ.get(ENV_MODE) == "compute":
            with pytest.raises(Exception, match="aclrtSetStreamAttribute|aclmdlRI"):
                compiled(x)
        elif torch.npu.is_available():  # a real or an emulated device: the graph capture itself can start
            torch.testing.assert_close(compiled(x), torch.sin(x) + 1)
        else:
            with pytest.raises(Exception, match="aclInit|207004"):
                compiled(x)
    assert npu_lazy.ran(INDUCTOR_SETUP), "the first npugraphs call did not run the NPU Inductor set-up"
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_call"


@pytest.mark.requires_npu
def test_npugraphs_chain_on_a_device_matches_eager(npu_lazy):
    import torch
    from torch._dynamo.device_interface import get_interface_for_device

    x = torch.randn(8, device="npu")
    actual = torch.compile(lambda t: torch.sin(t) + 1, backend="npugraphs", fullgraph=True)(x)
    torch.testing.assert_close(actual, torch.sin(x) + 1)
    assert npu_lazy.ran(DYNAMO_SETUP) and npu_lazy.ran(INDUCTOR_SETUP)
    assert get_interface_for_device("npu").device_count() > 0


def test_zoo_npugraphs_reset_importing_graph_trees_is_caught(npu_lazy, monkeypatch):
    """(i) A reset that imports the graph trees to reset them: caught above."""
    npugraphs_reset_imports_graph_trees()
    caught(test_reset_reaches_graph_trees_only_when_loaded, npu_lazy, monkeypatch, "npugraphs-first",
           says=("'torch_npu.npu._graph_tree' must not be loaded yet, but it was loaded during phase 'reset'",
                 "in npugraphs_reset_imports_graph_trees.<locals>.patch.<locals>.reset"))


def test_the_npugraphs_entry_names_itself_in_dynamos_errors_and_reports(npu_lazy):
    """Like torch's own cudagraphs backend, the npugraphs entry object carries ``compiler_name``: Dynamo names a
    backend object by it (``torch._dynamo.optimize(backend)``), in its errors, logs and repro scripts, instead of
    the object's repr."""
    import torch
    import torch._dynamo

    entry = torch._dynamo.lookup_backend("npugraphs")
    debug_wrapper = torch._dynamo.eval_frame.get_compiler_fn(entry)
    assert debug_wrapper.__name__ == "npugraphs" and debug_wrapper._compiler_name == "npugraphs", (
        f"Dynamo names the npugraphs entry {debug_wrapper.__name__!r} (compiler {debug_wrapper._compiler_name!r})")

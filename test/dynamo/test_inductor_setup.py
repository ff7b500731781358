"""Guarantee 9: NPU Inductor support arrives with the Inductor set-up, complete, and not before.

Three ways in: importing ``torch_npu._inductor`` explicitly, the run-once
``_lazy_inductor_setup``, and the first call of an Inductor-compiled function.
Patches that belong to the import of torch_npu (decompositions, RNG prims)
are there from the start; patches of Inductor's own modules wait for the
set-up, and all of them are there once it ran.
"""

from __future__ import annotations

import pytest
from facts import DEFERRED, DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup, where_defined
from breakage import caught
from regressions import graph_tree_patches_at_dynamo_setup

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]


def test_explicit_npu_inductor_import_injects_the_npu_config(npu_lazy):
    """`import torch_npu._inductor` is itself a way in: it loads Inductor and adds the NPU keys to its
    config, with their defaults, without running the per-call Inductor set-up."""
    npu_lazy.assert_not_loaded("torch._inductor", "torch_npu._inductor")
    with npu_lazy.phase("npu_inductor"):
        import torch_npu._inductor  # noqa: F401
    from torch._inductor import config

    assert npu_lazy.first_loaded("torch._inductor") == "npu_inductor"
    defaults = {name: getattr(config, name, "<missing>") for name in
                ("npu_backend", "enable_shape_handling", "shape_handling_configs", "shape_handling_dict")}
    assert defaults == {"npu_backend": "default", "enable_shape_handling": False,
                        "shape_handling_configs": [], "shape_handling_dict": None}, defaults
    config.npu_backend = "mlir"
    assert config.npu_backend == "mlir" and config.get_config_copy()["npu_backend"] == "mlir"
    config.npu_backend = "default"
    assert config.get_config_copy()["npu_backend"] == "default"
    assert not npu_lazy.ran(INDUCTOR_SETUP), "importing torch_npu._inductor ran the per-call Inductor set-up"


@pytest.mark.npu_lazy(preload=["torch"])
def test_import_time_decomposition_and_rng_patches_load_no_compiler(npu_lazy):
    """The decomposition and RNG-prim patches are installed by `import torch_npu` itself, and installing
    them loads neither Dynamo nor Inductor."""
    import torch

    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    from torch_npu.utils import _inductor

    assert torch._decomp.decompositions._max_unpoolnd is _inductor._max_unpoolnd_patch
    for name in ("philox_rand_offset", "register_philox_rand", "get_device"):
        owner = getattr(torch._prims.rng_prims, name).__module__
        assert owner == "torch_npu.utils._inductor", f"torch._prims.rng_prims.{name} comes from {owner}"
    npu_lazy.assert_not_loaded(*DEFERRED)


def _inductor_patch_owners() -> dict[str, object]:
    """Each Inductor patch that the NPU Inductor set-up owns -> the patched object if in place now, else None."""
    import torch
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.cudagraph_trees as cudagraph_trees
    import torch._inductor.cudagraph_utils as cudagraph_utils
    from torch_npu.utils import _graph_tree

    patched = {
        "compile_fx.cudagraphify": (compile_fx.cudagraphify,
                                    compile_fx.cudagraphify is _graph_tree.npugraphify),
        "cudagraph_utils.check_multiple_devices_or_any_cpu_nodes": (
            cudagraph_utils.check_multiple_devices_or_any_cpu_nodes,
            cudagraph_utils.check_multiple_devices_or_any_cpu_nodes
            is _graph_tree.check_multiple_devices_or_any_cpu_nodes),
        "cudagraph_trees.get_manager": (cudagraph_trees.get_manager,
                                        cudagraph_trees.get_manager.__module__ == "torch_npu.utils._graph_tree"),
        "torch.compiler.npugraph_mark_step_begin": (
            torch.compiler.npugraph_mark_step_begin,
            torch.compiler.npugraph_mark_step_begin is _graph_tree.npugraph_mark_step_begin),
    }
    return {name: value if in_place else None for name, (value, in_place) in patched.items()}


def test_inductor_patches_wait_for_the_inductor_setup_and_then_all_hold(npu_lazy):
    """With Inductor's modules already loaded (by Dynamo), none of the NPU Inductor patches may be in
    place until the Inductor set-up runs; after it, every one is, and a second run changes nothing."""
    import torch

    with npu_lazy.phase("dynamo"):
        import torch._dynamo
        import torch._inductor.compile_fx
    assert npu_lazy.ran(DYNAMO_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor", "torch_npu.utils._graph_tree")
    early = {name: where_defined(value) for name, value in _inductor_patch_owners().items() if value is not None}
    assert not early, f"NPU Inductor patches in place after phase 'dynamo', before the Inductor set-up: {early}"

    from torch_npu.utils import _dynamo

    with npu_lazy.phase("inductor_setup"):
        _dynamo._lazy_inductor_setup()
    missing = [name for name, value in _inductor_patch_owners().items() if value is None]
    assert not missing, f"NPU Inductor patches missing after the Inductor set-up: {missing}"
    assert npu_lazy.first_loaded("torch_npu._inductor") == "inductor_setup"

    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.scheduler as scheduler
    from torch._inductor.codegen.common import get_device_op_overrides
    from torch._inductor.utils import GPU_TYPES

    assert "npu" in GPU_TYPES
    assert get_device_op_overrides("npu").__class__.__module__.startswith("torch_npu._inductor")
    has_triton = torch.utils._triton.has_triton
    assert has_triton.__module__ == "torch_npu.utils._dynamo"
    assert compile_fx.has_triton is has_triton and scheduler.has_triton is has_triton, (
        "Inductor modules kept a has_triton other than torch_npu's")
    assert torch.utils._triton._device_supports_tma.__module__ == "torch_npu._inductor.utils"
    config = torch._inductor.config
    assert (config.npu_backend, config.enable_shape_handling, config.shape_handling_configs,
            config.shape_handling_dict) == ("default", False, [], None)

    before = dict(vars(compile_fx)), torch.compiler.npugraph_mark_step_begin
    _dynamo._lazy_inductor_setup()
    assert (dict(vars(compile_fx)), torch.compiler.npugraph_mark_step_begin) == before, (
        "running the Inductor set-up twice re-installed patches")


@pytest.mark.requires_npu
def test_inductor_triton_backend_patches_on_a_device(npu_lazy):
    """The Triton-backend patches of NPU Inductor are installed only where has_triton() is true, which needs
    an NPU device: on the CANN host stub torch_npu skips them by design."""
    import torch
    from torch._inductor.codecache import CacheBase
    from torch._inductor.graph import GraphLowering
    from torch_npu.utils import _dynamo

    _dynamo._lazy_inductor_setup()
    assert torch.utils._triton.has_triton()
    assert GraphLowering.codegen_with_cpp_wrapper.__module__ == "torch_npu._inductor.graph"
    assert CacheBase.get_system.__module__ == "torch_npu._inductor.codegen.common"


def _compile_with_lowering_replaced(npu_lazy, x):
    """Compile ``sin(x) + 1`` with Inductor, replacing only the final lowering (compile_fx), so the chain
    from wrapper to NPU Inductor set-up runs for real without generating a kernel. Returns the calls."""
    import torch

    compiled = npu_lazy.compile(lambda t: torch.sin(t) + 1, backend="inductor", fullgraph=True, check_eager=False)
    assert npu_lazy.ran(DYNAMO_SETUP), "creating the Inductor wrapper did not set up Dynamo"
    assert not npu_lazy.ran(INDUCTOR_SETUP), "creating the Inductor wrapper ran the Inductor set-up"
    npu_lazy.assert_not_loaded("torch_npu._inductor")

    import torch._inductor.compile_fx as compile_fx

    lowering_calls = []

    def record_lowering(model, inputs, **kwargs):
        lowering_calls.append(len(inputs))
        return lambda *args: [args[0]]

    original = compile_fx.compile_fx
    compile_fx.compile_fx = record_lowering
    try:
        compiled(x)
    finally:
        compile_fx.compile_fx = original
    return lowering_calls


def test_first_inductor_call_runs_the_chain_in_order(npu_lazy):
    """Wrapper: Dynamo set-up only. First call: the NPU Inductor set-up, then the lowering, once."""
    import torch

    lowering_calls = _compile_with_lowering_replaced(npu_lazy, torch.randn(8))
    assert lowering_calls == [1], f"the lowering ran {len(lowering_calls)} times on the first call"
    assert npu_lazy.ran(INDUCTOR_SETUP)
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_call"


@pytest.mark.requires_npu
def test_first_inductor_call_on_a_device_registers_the_npu_interface(npu_lazy):
    """The same chain on npu tensors: Dynamo's device interface for "npu" then reports a device."""
    import torch
    from torch._dynamo.device_interface import get_interface_for_device

    assert _compile_with_lowering_replaced(npu_lazy, torch.randn(8, device="npu")) == [1]
    assert npu_lazy.ran(INDUCTOR_SETUP)
    assert get_interface_for_device("npu").device_count() > 0


def test_zoo_graph_tree_patches_at_dynamo_setup_are_caught(npu_lazy):
    """(f) Moving the graph-tree patches into the Dynamo set-up fails the deferral test above."""
    graph_tree_patches_at_dynamo_setup()
    caught(test_inductor_patches_wait_for_the_inductor_setup_and_then_all_hold, npu_lazy,
           says=("'torch_npu.utils._graph_tree' must not be loaded yet, but it was loaded during phase 'dynamo'",
                 "in graph_tree_patches_at_dynamo_setup.<locals>.patch.<locals>.setup_with_graph_trees"))

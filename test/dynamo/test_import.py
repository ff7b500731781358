"""Guarantee 1: importing torch_npu (or torch with device-backend autoload) defers the compiler stack."""

from __future__ import annotations

import sys

import pytest
from facts import DEFERRED, DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup, where_defined
from breakage import caught
from regressions import generic_wrapper_patched_at_import

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch"])]


def test_import_torch_npu_defers_compiler_stack(npu_lazy):
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    npu_lazy.assert_loaded("torch_npu")
    npu_lazy.assert_not_loaded(*DEFERRED)
    assert not npu_lazy.ran(DYNAMO_SETUP)


@pytest.mark.npu_lazy(preload=[], autoload=True)
def test_import_torch_with_autoload_defers_compiler_stack(npu_lazy):
    with npu_lazy.phase("import"):
        import torch  # noqa: F401  (the torch.backends entry point imports torch_npu)
    assert npu_lazy.first_loaded("torch_npu") == "import"
    npu_lazy.assert_not_loaded(*DEFERRED)


def test_dynamo_post_import_trigger_is_installed(npu_lazy):
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    from torch_npu.utils._dynamo import _DynamoPostImportFinder

    assert any(isinstance(finder, _DynamoPostImportFinder) for finder in sys.meta_path)
    npu_lazy.assert_not_loaded("torch._dynamo")


def test_the_trigger_fires_once_and_leaves_sys_meta_path(npu_lazy):
    """The first import of torch._dynamo after torch_npu sets Dynamo up, and the trigger then takes itself off
    sys.meta_path: every later import in the process would otherwise pass through it."""
    import torch_npu  # noqa: F401
    from torch_npu.utils._dynamo import _DynamoPostImportFinder

    with npu_lazy.phase("dynamo"):
        import torch._dynamo  # noqa: F401
    assert npu_lazy.ran(DYNAMO_SETUP)
    left = [finder for finder in sys.meta_path if isinstance(finder, _DynamoPostImportFinder)]
    assert not left, f"the Dynamo post-import trigger is still on sys.meta_path after it fired: {left}"


@pytest.mark.parametrize("name", ["npugraph_ex", "torchair"])
def test_a_module_of_that_name_imported_before_torch_npu_is_kept(npu_lazy, monkeypatch, name):
    """torch_npu's lazy proxies take the top-level names ``npugraph_ex`` and ``torchair`` only where they are free:
    a module the process imported under that name first stays what that name means."""
    import types

    theirs = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, theirs)
    import torch_npu  # noqa: F401
    assert sys.modules[name] is theirs, f"import torch_npu replaced sys.modules[{name!r}] with {sys.modules[name]!r}"


def test_torch_compile_is_untouched_and_the_wrapper_patch_loads_nothing(npu_lazy):
    """torch.compile stays torch's own. The Inductor wrapper's __init__ *is* replaced at import:
    that replacement is the deferral mechanism, and it loads neither Dynamo nor Inductor."""
    import torch

    compile_before = torch.compile
    init_before = torch._TorchCompileInductorWrapper.__init__
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    assert torch.compile is compile_before
    init_after = torch._TorchCompileInductorWrapper.__init__
    assert init_after is not init_before and init_after.__module__ == "torch_npu.utils._dynamo"
    npu_lazy.assert_not_loaded("torch._dynamo", "torch._inductor")


@pytest.mark.npu_lazy(preload=["torch"], track=["torch_npu.dynamo:_register_backends"])
def test_dynamo_imported_before_torch_npu_triggers_setup_once(npu_lazy):
    import torch

    with npu_lazy.phase("dynamo"):
        import torch._dynamo  # noqa: F401
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    assert npu_lazy.ran(DYNAMO_SETUP)
    npu_lazy.compile(lambda x: x + 1, backend="inductor", name="a")
    npu_lazy.compile(lambda x: x - 1, backend="inductor", name="b")
    assert npu_lazy.calls("torch_npu.dynamo:_register_backends") == 1
    npu_lazy.assert_not_loaded("torch_npu._inductor")


def test_import_replaces_has_triton_and_installs_one_trigger_only(npu_lazy):
    """What `import torch_npu` may change in torch before any compile: has_triton (torch_npu's device-aware
    version) and one post-import finder for torch._dynamo. torch.compile and the generic compile wrapper
    stay torch's own, and the Dynamo set-up waits for Dynamo."""
    import torch
    import torch.utils._triton

    compile_before = torch.compile
    generic_init_before = torch._TorchCompileWrapper.__init__
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    from torch_npu.utils import _dynamo

    npu_lazy.assert_not_loaded(*DEFERRED)
    assert torch.compile is compile_before, "import torch_npu replaced torch.compile"
    generic_init = torch._TorchCompileWrapper.__init__
    assert generic_init is generic_init_before, (
        f"phase 'import' replaced torch._TorchCompileWrapper.__init__ (the non-Inductor wrapper) with "
        f"{where_defined(generic_init)}")
    assert torch.utils._triton.has_triton is _dynamo.has_triton, (
        f"torch.utils._triton.has_triton is {torch.utils._triton.has_triton.__module__}'s, not torch_npu's")
    finders = [finder for finder in sys.meta_path if isinstance(finder, _dynamo._DynamoPostImportFinder)]
    assert len(finders) == 1, f"{len(finders)} Dynamo post-import finders on sys.meta_path, expected exactly 1"
    assert not npu_lazy.ran(DYNAMO_SETUP)


@pytest.mark.npu_lazy(preload=["torch"], track=["torch_npu.dynamo:_register_backends"])
def test_preimported_dynamo_is_set_up_at_import_and_eager_compile_needs_no_inductor(npu_lazy):
    """Dynamo loaded before torch_npu: the set-up runs during `import torch_npu` (no trigger is left behind
    for an import that already happened), exactly once, and an eager-backend compile needs no Inductor set-up."""
    import torch

    with npu_lazy.phase("dynamo"):
        import torch._dynamo
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    from torch_npu.utils import _dynamo

    assert npu_lazy.ran(DYNAMO_SETUP), "torch._dynamo was already loaded, yet import torch_npu did not set it up"
    assert not any(isinstance(finder, _dynamo._DynamoPostImportFinder) for finder in sys.meta_path), (
        "a post-import trigger was installed for torch._dynamo, which was already imported")
    compiled = npu_lazy.compile(lambda x: x + 1, backend="eager", fullgraph=True)
    compiled(torch.tensor([1, 2, 3]))
    assert compiled(torch.tensor(1)).item() == 2
    assert npu_lazy.calls("torch_npu.dynamo:_register_backends") == 1
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor")


@pytest.mark.parametrize("fsdp_first", [True, False], ids=["fsdp-imported-first", "fsdp-imported-after"])
def test_fsdp_gets_the_npu_grad_scaler_in_either_import_order(npu_lazy, fsdp_first):
    """torch_npu replaces FSDP's ShardedGradScaler whichever of the two was imported first, and neither
    import order loads the compiler stack."""
    if fsdp_first:
        with npu_lazy.phase("fsdp"):
            import torch.distributed.fsdp  # noqa: F401
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    with npu_lazy.phase("fsdp_modules"):
        from torch.distributed.fsdp import sharded_grad_scaler
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup  # noqa: F401
    from torch_npu.npu.amp.sharded_grad_scaler import _ShardedGradScaler

    assert sharded_grad_scaler.ShardedGradScaler is _ShardedGradScaler, (
        f"FSDP's ShardedGradScaler is {sharded_grad_scaler.ShardedGradScaler.__module__}'s, not torch_npu's")
    npu_lazy.assert_not_loaded(*DEFERRED)


def test_zoo_generic_wrapper_patched_at_import_is_caught(npu_lazy):
    """(e) A regression that patches torch's generic compile wrapper at import fails the test above."""
    generic_wrapper_patched_at_import()
    caught(test_import_replaces_has_triton_and_installs_one_trigger_only, npu_lazy,
           says=("phase 'import' replaced torch._TorchCompileWrapper.__init__",
                 "regressions.py:", "in generic_wrapper_patched_at_import.<locals>.patch.<locals>.init_with_dynamo_setup"))


def test_the_post_import_trigger_is_installed_once_however_often_it_is_asked(npu_lazy):
    """Installing the trigger again (a second caller of torch_npu's set-up) leaves one finder: two would wrap
    torch._dynamo's loader twice."""
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    from torch_npu.utils import _dynamo

    _dynamo._install_dynamo_post_import_trigger()
    _dynamo._install_dynamo_post_import_trigger()
    finders = [finder for finder in sys.meta_path if isinstance(finder, _dynamo._DynamoPostImportFinder)]
    assert len(finders) == 1, f"{len(finders)} Dynamo post-import finders on sys.meta_path, expected exactly 1"
    assert not npu_lazy.ran(DYNAMO_SETUP)


def test_the_post_import_trigger_goes_ahead_of_import_hooks_installed_before_torch_npu(npu_lazy):
    """An import hook at the head of sys.meta_path before torch_npu is imported (an editable install's finder,
    a lazy-import or instrumentation hook) may serve torch._dynamo itself: torch_npu's trigger must see the import
    first, or the Dynamo set-up never runs and the NPU backends are missing from Dynamo."""
    import importlib.abc
    import importlib.machinery

    class ServesDynamo(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            return importlib.machinery.PathFinder.find_spec(fullname, path) if fullname == "torch._dynamo" else None

    hook = ServesDynamo()
    sys.meta_path.insert(0, hook)
    try:
        with npu_lazy.phase("import"):
            import torch_npu  # noqa: F401
        with npu_lazy.phase("dynamo"):
            import torch._dynamo  # noqa: F401
    finally:
        sys.meta_path.remove(hook)
    assert npu_lazy.first_loaded("torch._dynamo") == "dynamo"
    assert npu_lazy.ran(DYNAMO_SETUP), (
        "torch._dynamo was imported through an import hook installed before torch_npu, and the Dynamo set-up "
        "did not run: the post-import trigger is not at the head of sys.meta_path")


def test_the_post_import_finder_asked_directly_answers_with_the_wrapped_dynamo_spec(npu_lazy):
    """The finder finds torch._dynamo through the other finders even when it is not on sys.meta_path itself (a
    tool asking each finder in turn, a copy of the list): it answers with the spec and its set-up loader, not None."""
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    from torch_npu.utils._dynamo import _DynamoPostImportFinder, _DynamoPostImportLoader

    finder = _DynamoPostImportFinder()
    meta_path = list(sys.meta_path)
    spec = finder.find_spec("torch._dynamo")
    assert spec is not None and spec.name == "torch._dynamo", (
        f"a post-import finder not on sys.meta_path answered {spec!r} for torch._dynamo, which the other finders find")
    assert isinstance(spec.loader, _DynamoPostImportLoader), spec.loader
    assert sys.meta_path == meta_path, "asking the finder changed sys.meta_path"
    npu_lazy.assert_not_loaded("torch._dynamo")


def test_a_failed_first_import_of_dynamo_keeps_the_trigger_for_the_next(npu_lazy):
    """The trigger takes itself off sys.meta_path while it asks the other finders, and must put itself back: if
    the first import of torch._dynamo fails (a missing dependency, an interrupt), the import that then succeeds
    must still run the Dynamo set-up."""
    import importlib.abc
    import importlib.machinery

    class FailsOnce(importlib.abc.MetaPathFinder):
        failed = False

        def find_spec(self, fullname, path=None, target=None):
            if fullname != "torch._dynamo" or self.failed:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            outer = self

            class Failing(importlib.abc.Loader):
                def create_module(self, spec):
                    return None

                def exec_module(self, module):
                    outer.failed = True
                    raise ImportError("injected: the first import of torch._dynamo fails")

            spec.loader = Failing()
            return spec

    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    hook = FailsOnce()
    sys.meta_path.insert(1, hook)  # behind torch_npu's trigger, which asks it
    try:
        with pytest.raises(ImportError, match="injected"):
            import torch._dynamo
        assert hook.failed and not npu_lazy.ran(DYNAMO_SETUP)
        with npu_lazy.phase("dynamo"):
            import torch._dynamo  # noqa: F401
    finally:
        sys.meta_path.remove(hook)
    assert npu_lazy.ran(DYNAMO_SETUP), (
        "torch._dynamo imported after a failed first import, and the Dynamo set-up did not run: the post-import "
        "trigger was lost with the failed import")

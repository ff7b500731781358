"""Guarantee 1: importing torch_npu (or torch with device-backend autoload) defers the compiler stack."""

from __future__ import annotations

import sys

import pytest
from facts import DEFERRED, DYNAMO_SETUP, needs_deferred_setup

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

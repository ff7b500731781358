"""Guarantee 1 (test/dynamo/test_import.py), one process per test."""

from __future__ import annotations

from .conftest import check

DEFERRED = ("torch._dynamo", "torch._inductor", "torch_npu._inductor", "triton")

IMPORT_DEFERS = f"""
import torch
import torch_npu
from torch_npu.utils._dynamo import _lazy_dynamo_setup
assert "torch_npu" in sys.modules
for name in {DEFERRED!r}:
    assert not loaded(name), name
assert not _lazy_dynamo_setup.has_run
"""


def test_import_torch_npu_defers_compiler_stack():
    check(IMPORT_DEFERS)


def test_import_torch_with_autoload_defers_compiler_stack():
    check(f"""
    assert "torch_npu" not in sys.modules
    import torch  # the torch.backends entry point imports torch_npu
    assert "torch_npu" in sys.modules
    for name in {DEFERRED!r}:
        assert not loaded(name), name
    """, autoload=True)


def test_dynamo_post_import_trigger_is_installed():
    check("""
    import torch
    import torch_npu
    from torch_npu.utils._dynamo import _DynamoPostImportFinder
    assert any(isinstance(finder, _DynamoPostImportFinder) for finder in sys.meta_path)
    assert not loaded("torch._dynamo")
    """)


def test_torch_compile_is_untouched_and_the_wrapper_patch_loads_nothing():
    check("""
    import torch
    compile_before = torch.compile
    init_before = torch._TorchCompileInductorWrapper.__init__
    import torch_npu
    assert torch.compile is compile_before
    init_after = torch._TorchCompileInductorWrapper.__init__
    assert init_after is not init_before and init_after.__module__ == "torch_npu.utils._dynamo"
    assert not loaded("torch._dynamo")
    assert not loaded("torch._inductor")
    """)


def test_dynamo_imported_before_torch_npu_triggers_setup_once():
    check("""
    import importlib.util

    calls = []

    class CountRegisterBackends:
        # wrap torch_npu.dynamo._register_backends the moment its module has loaded
        def find_spec(self, fullname, path=None, target=None):
            if fullname != "torch_npu.dynamo":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            exec_module = spec.loader.exec_module

            def exec_and_wrap(module):
                exec_module(module)
                original = module._register_backends

                def counting(*args, **kwargs):
                    calls.append(1)
                    return original(*args, **kwargs)

                module._register_backends = counting

            spec.loader.exec_module = exec_and_wrap
            return spec

    import torch
    import torch._dynamo
    sys.meta_path.insert(0, CountRegisterBackends())
    import torch_npu
    from torch_npu.utils._dynamo import _lazy_dynamo_setup
    assert _lazy_dynamo_setup.has_run
    torch.compile(lambda x: x + 1, backend="inductor")
    torch.compile(lambda x: x - 1, backend="inductor")
    assert len(calls) == 1, calls
    assert not loaded("torch_npu._inductor")
    """)

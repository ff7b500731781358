"""Known ways to break torch_npu's deferred loading, re-created on demand inside an isolated test.

Set ``NPU_LAZY_REGRESSION=<name>`` and the autouse fixture in conftest.py
installs the regression in the test's child process before the test body
runs; the regression zoo then checks that the guarantee tests fail, and
fail with a message that points at the cause.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable

ENV = "NPU_LAZY_REGRESSION"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Run a callback right after one module's code ran: the module's last line, as it were."""

    def __init__(self, name: str, callback: Callable) -> None:
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        exec_module = spec.loader.exec_module
        callback = self.callback

        def exec_then_patch(module):
            exec_module(module)
            callback(module)

        spec.loader.exec_module = exec_then_patch
        return spec


def after_import(name: str, callback: Callable) -> None:
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def _patch_wrapper_init(extra: Callable) -> None:
    """Wrap torch_npu's patched Inductor-wrapper __init__ (installed at torch_npu import)."""

    def patch(_module) -> None:
        import torch

        wrapper = torch._TorchCompileInductorWrapper
        patched_init = wrapper.__init__

        def init_with_regression(self, *args, **kwargs):
            patched_init(self, *args, **kwargs)
            extra()

        wrapper.__init__ = init_with_regression

    after_import("torch_npu", patch)


def eager_inductor_setup() -> None:
    """(a) The regression that shipped: the wrapper's __init__ runs the Inductor setup."""

    def setup_now():
        from torch_npu.utils._dynamo import _lazy_inductor_setup

        _lazy_inductor_setup()

    _patch_wrapper_init(setup_now)


def eager_dynamo_import() -> None:
    """(b) Before the import-time optimisation: `import torch_npu` set up Dynamo right away."""

    def patch(module) -> None:
        install_trigger = module._install_dynamo_post_import_trigger

        def import_dynamo_now():
            import torch._dynamo  # noqa: F401

            install_trigger()

        module._install_dynamo_post_import_trigger = import_dynamo_now

    after_import("torch_npu.utils._dynamo", patch)


def triton_helpers_at_wrap() -> None:
    """(c) Ascend Triton helpers imported while the wrapper is created."""

    def import_helpers():
        import torch_npu._inductor.runtime.triton_helpers  # noqa: F401

    _patch_wrapper_init(import_helpers)


def wrong_first_call() -> None:
    """(d) A compiled first call whose output differs from eager."""

    def patch(_module) -> None:
        import torch

        wrapper = torch._TorchCompileInductorWrapper
        patched_call = wrapper.__call__

        def call_then_corrupt(self, model, inputs):
            compiled = patched_call(self, model, inputs)

            def corrupted(*args):
                return [out + 1 if isinstance(out, torch.Tensor) else out for out in compiled(*args)]

            return corrupted

        wrapper.__call__ = call_then_corrupt

    after_import("torch_npu", patch)


REGRESSIONS: dict[str, Callable[[], None]] = {
    "eager_inductor_setup": eager_inductor_setup,
    "eager_dynamo_import": eager_dynamo_import,
    "triton_helpers_at_wrap": triton_helpers_at_wrap,
    "wrong_first_call": wrong_first_call,
}

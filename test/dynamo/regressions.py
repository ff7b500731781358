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
import traceback
from typing import Callable

import pytest

ENV = "NPU_LAZY_REGRESSION"


def failure_of(guarantee: Callable, *args) -> str:
    """The full text of the failure a guarantee test's body raises, notes included; fails if it passes."""
    with pytest.raises(BaseException) as excinfo:  # noqa: PT011 - the caller checks what the text says
        guarantee(*args)
    return "".join(traceback.format_exception(excinfo.value))


def assert_says(text: str, *fragments: str) -> None:
    """The failure names every fragment (module or function, phase, code location)."""
    missing = [fragment for fragment in fragments if fragment not in text]
    assert not missing, f"the failure does not say {missing}:\n{text}"


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


def generic_wrapper_patched_at_import() -> None:
    """(e) `import torch_npu` also patches torch's generic (non-Inductor) compile wrapper, say to run the
    Dynamo set-up for every backend: a change to torch's own class at import, which torch_npu promises not to make."""

    def patch(_module) -> None:
        import torch

        generic_init = torch._TorchCompileWrapper.__init__

        def init_with_dynamo_setup(self, *args, **kwargs):
            from torch_npu.utils._dynamo import _lazy_dynamo_setup

            _lazy_dynamo_setup()
            generic_init(self, *args, **kwargs)

        torch._TorchCompileWrapper.__init__ = init_with_dynamo_setup

    after_import("torch_npu", patch)


def graph_tree_patches_at_dynamo_setup() -> None:
    """(f) The NPU graph-tree patches of Inductor move from the Inductor set-up to the Dynamo set-up."""

    def patch(module) -> None:
        dynamo_setup = module._lazy_dynamo_setup

        @module.run_once
        def setup_with_graph_trees():
            dynamo_setup()
            from torch_npu.utils._graph_tree import _apply_npugraph_tree_methods

            _apply_npugraph_tree_methods()

        module._lazy_dynamo_setup = setup_with_graph_trees

    after_import("torch_npu.utils._dynamo", patch)


def mark_step_through_graph_trees() -> None:
    """(g) `torch.compiler.npugraph_mark_step_begin` bound straight to the graph-tree module's function,
    whose module imports Inductor: the public entry then loads the compiler on its first use."""

    def patch(_module) -> None:
        import torch

        def mark_step_begin():
            from torch_npu.utils._graph_tree import npugraph_mark_step_begin

            return npugraph_mark_step_begin()

        mark_step_begin.__name__ = "npugraph_mark_step_begin"
        torch.compiler.npugraph_mark_step_begin = mark_step_begin

    after_import("torch_npu", patch)


def duplicate_entry_point_registration() -> None:
    """(h) Registration forgets that Dynamo's registry is in the middle of loading torch_npu's entry point,
    and registers the backend itself: the lookup that loaded it then registers the same name twice."""

    def patch(module) -> None:
        def register_always(backend, name="npu"):
            from torch._dynamo import register_backend
            from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS

            if getattr(_COMPILER_FNS.get(name), "__module__", None) == module.__name__:
                return
            _BACKENDS.pop(name, None)
            register_backend(backend, name)

        module._register_npu_backend = register_always

    after_import("torch_npu.dynamo", patch)


def npugraphs_reset_imports_graph_trees() -> None:
    """(i) The npugraphs backend's reset imports the NPU graph trees to reset them, even when no graph
    was ever captured."""

    def patch(module) -> None:
        def reset():
            import importlib

            importlib.import_module("torch_npu.npu._graph_tree").reset_npugraph_trees()

        type(module._npugraphs_backend_entrypoint).reset = staticmethod(reset)

    after_import("torch_npu.dynamo", patch)


REGRESSIONS: dict[str, Callable[[], None]] = {
    "eager_inductor_setup": eager_inductor_setup,
    "eager_dynamo_import": eager_dynamo_import,
    "triton_helpers_at_wrap": triton_helpers_at_wrap,
    "wrong_first_call": wrong_first_call,
    "generic_wrapper_patched_at_import": generic_wrapper_patched_at_import,
    "graph_tree_patches_at_dynamo_setup": graph_tree_patches_at_dynamo_setup,
    "mark_step_through_graph_trees": mark_step_through_graph_trees,
    "duplicate_entry_point_registration": duplicate_entry_point_registration,
    "npugraphs_reset_imports_graph_trees": npugraphs_reset_imports_graph_trees,
}

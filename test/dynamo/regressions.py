"""Known ways to break torch_npu's deferred loading, re-created on demand inside an isolated test.

Set ``NPU_LAZY_REGRESSION=<name>`` and the autouse fixture in conftest.py
installs the regression in the test's child process before the test body
runs; the regression zoo then checks that the guarantee tests fail, and
fail with a message that points at the cause.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from breakage import after_import  # test/breakage.py, shared with test/upstream

ENV = "NPU_LAZY_REGRESSION"


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


# -- group port-b: backend scope, export, non-Inductor backends, has_triton and Dynamo patches, fork recovery --


def _replace(module_name: str, owner_of: Callable, name: str, replacement_for: Callable) -> None:
    """Once ``module_name`` has loaded: ``owner.name = replacement_for(original, module)``, owner = owner_of(module)."""

    def patch(module) -> None:
        owner = owner_of(module)
        setattr(owner, name, replacement_for(getattr(owner, name), module))

    after_import(module_name, patch)


def scope_entry_without_restore() -> None:
    """The backend scope's entry lost its try/except: a failing entry leaves TORCHINDUCTOR_NPU_BACKEND set."""

    def enter_without_restore(_original, module):
        def enter(self):
            import os

            self._old_env = os.environ.get("TORCHINDUCTOR_NPU_BACKEND")
            os.environ["TORCHINDUCTOR_NPU_BACKEND"] = self.backend
            module.register_inductor_npu()
            module._lazy_inductor_setup()
            return self

        return enter

    _replace("torch_npu.utils._dynamo", lambda module: module._NpuBackendScope, "__enter__", enter_without_restore)


def register_before_option_validation() -> None:
    """The wrapper registers NPU Inductor before torch has validated the compile options."""

    def init_registering_first(original, _module):
        def init(self, *args, **kwargs):
            sys.modules["torch_npu.utils._dynamo"].register_inductor_npu()
            original(self, *args, **kwargs)

        return init

    _replace("torch_npu", lambda _module: sys.modules["torch"]._TorchCompileInductorWrapper, "__init__",
             init_registering_first)


def export_runs_inductor_setup() -> None:
    """torch_npu wraps the public torch.export.export and runs the whole set-up, Inductor's too, first."""

    def export_after_full_setup(original, _module):
        def export(*args, **kwargs):
            npu_dynamo = sys.modules["torch_npu.utils._dynamo"]
            npu_dynamo._lazy_dynamo_setup()
            npu_dynamo._lazy_inductor_setup()
            return original(*args, **kwargs)

        return export

    _replace("torch_npu", lambda _module: sys.modules["torch"].export, "export", export_after_full_setup)


def optimize_runs_inductor_setup() -> None:
    """torch_npu's torch._dynamo.optimize hook sets up NPU Inductor for every backend, eager and custom ones too."""

    def hook_then_wrap(original, _module):
        def compat_patch_dynamo_optimize():
            original()
            dynamo = sys.modules["torch._dynamo"]
            optimize = dynamo.optimize

            def optimize_with_inductor_setup(*args, **kwargs):
                sys.modules["torch_npu.utils._dynamo"]._lazy_inductor_setup()
                return optimize(*args, **kwargs)

            dynamo.optimize = optimize_with_inductor_setup

        return compat_patch_dynamo_optimize

    _replace("torch_npu._compat.dynamo", lambda module: module, "compat_patch_dynamo_optimize", hook_then_wrap)


def has_triton_ignores_npu() -> None:
    """torch_npu's has_triton re-synced with upstream's device list, which has no 'npu' entry."""

    def upstream_devices_only(original, module):
        import functools

        @functools.lru_cache(None)
        def has_triton(*, include_cpu: bool = False) -> bool:
            if not sys.modules["torch.utils._triton"].has_triton_package():
                return False
            from torch._dynamo.device_interface import get_interface_for_device

            module._dynamo_register_interface_for_device()
            devices = ("cuda", "xpu", "cpu") if include_cpu else ("cuda", "xpu")
            return any(get_interface_for_device(device).is_available() for device in devices)

        triton_utils = sys.modules.get("torch.utils._triton")
        if getattr(triton_utils, "has_triton", None) is original:  # torch_npu already installed its own: follow
            triton_utils.has_triton = has_triton
        return has_triton

    _replace("torch_npu.utils._dynamo", lambda module: module, "has_triton", upstream_devices_only)


def builtin_variable_patch_dropped() -> None:
    """A refactor of the Dynamo set-up steps drops the BuiltinVariable.call_id patch (Event ids in graphs)."""

    def no_op(_original, _module):
        def patch_builtin_variable():
            return None

        return patch_builtin_variable

    _replace("torch_npu.utils._dynamo", lambda module: module, "patch_builtin_variable", no_op)


def run_once_without_fork_reset() -> None:
    """torch_npu's run_once keeps its 'running in thread T' state in a forked child, where T does not exist."""

    import os

    def patch(module) -> None:
        state: dict = {}

        def remember() -> None:
            state.clear()
            for value in vars(module).values():
                if isinstance(getattr(value, "has_run", None), bool) and hasattr(value, "_is_running"):
                    state[id(value)] = (value, value._is_running, value._running_thread)

        def keep_in_child() -> None:  # runs after torch_npu's own reset, registered earlier
            for value, running, thread in state.values():
                value._is_running, value._running_thread = running, thread

        os.register_at_fork(before=remember, after_in_child=keep_in_child)

    after_import("torch_npu.utils._dynamo", patch)


REGRESSIONS.update({
    "scope_entry_without_restore": scope_entry_without_restore,
    "register_before_option_validation": register_before_option_validation,
    "export_runs_inductor_setup": export_runs_inductor_setup,
    "optimize_runs_inductor_setup": optimize_runs_inductor_setup,
    "has_triton_ignores_npu": has_triton_ignores_npu,
    "builtin_variable_patch_dropped": builtin_variable_patch_dropped,
    "run_once_without_fork_reset": run_once_without_fork_reset,
})


# -- group device: the device-side lazy initialisation (test_device_init.py), caught through the device calls --


def _try_lazy_init() -> None:
    """Initialise the NPU as torch_npu does on first use; on the host stub (no device) the attempt, its aclInit,
    is the regression, and its error is dropped as a careless caller would."""
    try:
        sys.modules["torch_npu"].npu._lazy_init()
    except RuntimeError:
        pass


def import_probes_device_count() -> None:
    """(j) `import torch_npu` asks the runtime how many devices there are."""
    after_import("torch_npu", lambda module: module._C._npu_getDeviceCount())


def availability_check_initialises() -> None:
    """(k) torch.npu.is_available() initialises the runtime to answer."""

    def patch(module) -> None:
        original = module.npu.is_available

        def is_available() -> bool:
            _try_lazy_init()
            return original()

        module.npu.is_available = is_available

    after_import("torch_npu", patch)


def wrapper_initialises_device() -> None:
    """(l) Creating an Inductor wrapper initialises the NPU."""
    _patch_wrapper_init(_try_lazy_init)


def runtime_initialised_twice() -> None:
    """(m) The first device use initialises the runtime a second time (aclInit again after torch_npu's own)."""

    def patch(module) -> None:
        import ctypes

        original = module._lazy_init

        def lazy_init() -> None:
            first = not module._initialized
            original()
            if first:
                ctypes.CDLL(None).aclInit(None)

        module._lazy_init = lazy_init

    after_import("torch_npu.npu", patch)


REGRESSIONS.update({
    "import_probes_device_count": import_probes_device_count,
    "availability_check_initialises": availability_check_initialises,
    "wrapper_initialises_device": wrapper_initialises_device,
    "runtime_initialised_twice": runtime_initialised_twice,
})


# -- group field: the failures users hit (test_import_order, test_workers, test_reentry, test_threads) ---------


def autoload_guard_removed() -> None:
    """torch-spyre#2925's bug in torch_npu: its ``__init__`` no longer holds device-backend autoload off around its
    own ``import torch``, so torch's autoload imports the half-imported torch_npu again."""
    import importlib.abc
    import importlib.util

    guard = 'os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"'

    class WithoutGuard(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname != "torch_npu":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)

            def exec_without_guard(module) -> None:
                with open(spec.origin, encoding="utf-8") as handle:
                    source = handle.read()
                if guard not in source:
                    raise AssertionError(f"the regression cannot be made: {spec.origin} has no {guard!r}")
                exec(compile(source.replace(guard, "pass", 1), spec.origin, "exec"), module.__dict__)

            spec.loader.exec_module = exec_without_guard
            return spec

    sys.meta_path.insert(0, WithoutGuard())


def dynamo_setup_imports_npu_inductor() -> None:
    """torch_npu's Dynamo set-up (its backend registration) imports torch_npu._inductor: where Dynamo was imported
    before torch_npu, ``import torch_npu`` then loads NPU Inductor."""

    def register_then_import(original, _module):
        def _register_backends(*args, **kwargs):
            import torch_npu._inductor  # noqa: F401

            return original(*args, **kwargs)

        return _register_backends

    _replace("torch_npu.dynamo", lambda module: module, "_register_backends", register_then_import)


def triton_key_depends_on_torch_npu() -> None:
    """triton-ascend#2232's bug: Triton's Ascend backend package cannot be imported while torch_npu is not loaded,
    so ``triton_key()`` (which walks the backends' packages and skips one that fails to import) differs with and
    without torch_npu. Made after ``import triton`` (which loads the backends by path): the package's entry in
    sys.modules is None (an ImportError for every importer) until torch_npu has loaded."""
    held: dict = {}

    def hide(_module) -> None:
        held["module"] = sys.modules.get("triton.backends.ascend")
        sys.modules["triton.backends.ascend"] = None
        after_import("torch_npu", lambda _torch_npu: sys.modules.__setitem__("triton.backends.ascend", held["module"]))

    after_import("triton", hide)


def backend_load_not_recorded_at_import() -> None:
    """A direct ``import torch_npu._inductor`` loads the backend without recording it (as if the record moved from
    ``_load_backend`` into the registry), so the first compiled call loads it again."""

    def forget(_module) -> None:
        sys.modules["torch_npu.utils._dynamo"]._InductorNpuRegistry._loaded_backend = None

    after_import("torch_npu._inductor", forget)


def fork_child_forgets_backend() -> None:
    """A forked child resets the NPU Inductor registry ("reset state after fork"), so a worker of a parent that had
    compiled loads the backend a second time in its copy of the parent's set-up."""

    def patch(module) -> None:
        os.register_at_fork(after_in_child=lambda: setattr(module._InductorNpuRegistry, "_loaded_backend", None))

    after_import("torch_npu.utils._dynamo", patch)


def compile_pool_with_autoload() -> None:
    """torch_npu no longer holds device-backend autoload off while it warms Inductor's compile pool: the pool's
    interpreters import torch_npu through torch's autoload."""

    def patch(module) -> None:
        AsyncCompile = module.AsyncCompile
        warm_pool = AsyncCompile.warm_pool.__func__

        def warm_pool_with_autoload(cls) -> None:
            held = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
            os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
            try:
                warm_pool(cls)
            finally:
                os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = held or "1"

        AsyncCompile.warm_pool = classmethod(warm_pool_with_autoload)

    after_import("torch._inductor.async_compile", patch)


REGRESSIONS.update({
    "autoload_guard_removed": autoload_guard_removed,
    "dynamo_setup_imports_npu_inductor": dynamo_setup_imports_npu_inductor,
    "triton_key_depends_on_torch_npu": triton_key_depends_on_torch_npu,
    "backend_load_not_recorded_at_import": backend_load_not_recorded_at_import,
    "fork_child_forgets_backend": fork_child_forgets_backend,
    "compile_pool_with_autoload": compile_pool_with_autoload,
})


def order_dependent_inductor_config() -> None:
    """``import torch_npu`` changes an Inductor setting only where torch._inductor was imported before it: the
    process's Inductor config, and so its FX graph cache keys, depend on the import order."""

    def patch(_module) -> None:
        config = sys.modules.get("torch._inductor.config")
        if config is not None:
            config.unroll_reductions_threshold += 1

    after_import("torch_npu", patch)


REGRESSIONS["order_dependent_inductor_config"] = order_dependent_inductor_config

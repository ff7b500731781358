"""What torch_npu patches into torch, and that its deferred set-up still installs all of it, once.

``import torch_npu`` replaces ``torch.utils._triton.has_triton`` with its own
(which knows the NPU device interface); the Dynamo set-up, run when
torch._dynamo is first imported, patches Dynamo's variable trackers,
handlers, trace rules, backends and RNG registration. Each check names the
patch, what is there instead and where that is defined.

Some patches that torch_npu master's own test expects are newer than the
installed release; those parts skip, naming the release, and run on a newer
one.
"""

from __future__ import annotations

import inspect
import os
import sys
import types

import pytest
import regressions
from breakage import caught
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup, torch_npu_version

pytestmark = needs_deferred_setup

NPU_DYNAMO = "torch_npu.utils._dynamo"
#: the newest torch_npu line read without master's newer patches: 2.13.0 (installed here) and 2.14.0 (its wheel)
NEWEST_LINE_WITHOUT_MASTER_CHANGES = (2, 14)


def newer_than_installed(what: str) -> str | None:
    """The skip reason when ``what`` (a master-only behaviour) is newer than the installed torch_npu; else None."""
    version = torch_npu_version()
    if version is None or version.release[:2] > NEWEST_LINE_WITHOUT_MASTER_CHANGES:
        return None
    return (f"needs a torch_npu newer than 2.14 (built from torch_npu master, Ascend/pytorch, until a release "
            f"has it): {what} is in master, whose own test expects it, not in torch_npu {version} (nor in 2.14.0)")


def defined_at(obj) -> str:
    """``module.qualname defined at file:line`` for a function (unwrapping caches)."""
    if obj is None:
        return "nothing (None)"
    function = inspect.unwrap(obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj)
    code = getattr(function, "__code__", None)
    name = f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"
    if code is None:
        return f"{name} (not Python code)"
    path = code.co_filename
    short = path.split("site-packages/")[-1] if "site-packages/" in path else os.path.relpath(path)
    return f"{name} defined at {short}:{code.co_firstlineno}"


# -- has_triton ------------------------------------------------------------------------------------------------


def _fake_interface(available: bool):
    class Worker:
        @staticmethod
        def get_device_properties(*args, **kwargs):
            raise AssertionError("torch_npu's has_triton queried device properties (upstream's CUDA capability check)")

    class FakeInterface:
        @staticmethod
        def is_available():
            return available

    FakeInterface.Worker = Worker
    return FakeInterface


#: name -> (devices available, include_cpu, triton has a "cpu" backend, what torch_npu 2.13's has_triton answers)
HAS_TRITON_CASES = {
    "no_device": ((), False, True, False),
    "no_device_cpu_requested": ((), True, True, False),
    "cuda": (("cuda",), False, False, True),
    "xpu": (("xpu",), False, False, True),
    "npu": (("npu",), False, False, True),
    "cpu_requested": (("cpu",), True, True, True),
    "cpu_requested_without_a_triton_cpu_backend": (("cpu",), True, False, False),
}
#: torch_npu <= 2.14 counts the CPU only on request; master counts it by default
CPU_BY_DEFAULT = newer_than_installed("has_triton() counting a Triton-capable CPU without include_cpu=True")
if CPU_BY_DEFAULT is not None:
    HAS_TRITON_CASES["cpu_not_counted_unless_requested"] = (("cpu",), False, True, False)


def _has_triton_with(monkeypatch, devices, include_cpu: bool, cpu_backend: bool):
    """torch's has_triton (torch_npu's since import) with fake device interfaces; (answer, interface registrations)."""
    import torch
    from torch._dynamo import device_interface
    from torch_npu.utils import _dynamo

    interfaces = {device: _fake_interface(device in devices) for device in ("cuda", "xpu", "cpu", "npu", "mtia")}
    registrations = []
    register = _dynamo._dynamo_register_interface_for_device
    monkeypatch.setattr(_dynamo, "_dynamo_register_interface_for_device",
                        lambda: (registrations.append(1), register())[1])
    monkeypatch.setattr(device_interface, "get_interface_for_device", interfaces.__getitem__)
    monkeypatch.setattr(torch.utils._triton, "has_triton_package", lambda: True)
    triton, backends = types.ModuleType("triton"), types.ModuleType("triton.backends")
    backends.backends = {"cpu": object()} if cpu_backend else {}
    triton.backends = backends
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.backends", backends)
    has_triton = torch.utils._triton.has_triton
    has_triton.cache_clear()
    try:
        return has_triton(include_cpu=include_cpu), len(registrations)
    finally:
        has_triton.cache_clear()


@pytest.mark.npu_lazy(preload=["torch"])
def test_has_triton_preserves_target_device_semantics(npu_lazy, monkeypatch):
    """torch_npu's has_triton: CUDA without a capability query, XPU, NPU, and the CPU only on request.

    Every case must also register the NPU device interface exactly once.
    """
    with npu_lazy.phase("import"):
        import torch
        from torch_npu.utils import _dynamo
    assert torch.utils._triton.has_triton is _dynamo.has_triton, (
        f"after import torch_npu, torch.utils._triton.has_triton is {defined_at(torch.utils._triton.has_triton)}")
    npu_lazy.assert_not_loaded("torch._dynamo")
    for name, (devices, include_cpu, cpu_backend, expected) in HAS_TRITON_CASES.items():
        with npu_lazy.phase(name):
            answer, registrations = _has_triton_with(monkeypatch, devices, include_cpu, cpu_backend)
        assert answer == expected, (
            f"has_triton(include_cpu={include_cpu}) is {answer} with {list(devices) or 'no device'} available"
            f"{' and a Triton CPU backend' if cpu_backend else ''} (phase {name!r}), expected {expected}; "
            f"has_triton is {defined_at(torch.utils._triton.has_triton)}")
        assert registrations == 1, f"phase {name!r}: the NPU device interface was registered {registrations} times"


@pytest.mark.skipif(CPU_BY_DEFAULT is not None, reason=CPU_BY_DEFAULT or "")
@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_has_triton_counts_a_triton_cpu_by_default(npu_lazy, monkeypatch):
    answer, _ = _has_triton_with(monkeypatch, ("cpu",), False, True)
    assert answer, "has_triton() without include_cpu ignores a Triton-capable CPU"


@pytest.mark.npu_lazy(preload=["torch"], block=["triton"])
def test_has_triton_without_the_triton_package(npu_lazy):
    """Really without Triton (blocked, not mocked): False, and neither Dynamo nor the device interface set up."""
    with npu_lazy.phase("import"):
        import torch
        import torch_npu  # noqa: F401
    with npu_lazy.phase("has_triton"):
        answer = torch.utils._triton.has_triton()
    assert answer is False, f"has_triton() is {answer!r} without the triton package"
    npu_lazy.assert_not_loaded("torch._dynamo", "triton")
    assert not npu_lazy.ran(f"{NPU_DYNAMO}:_dynamo_register_interface_for_device"), "the NPU interface was registered"


# -- the Dynamo patch inventory ----------------------------------------------------------------------------------


def _dynamo_patches(torch, torch_npu):
    """(what, the object there now, the torch_npu function that installs the patch) for each patched attribute."""
    from torch._dynamo.device_interface import get_interface_for_device
    from torch._dynamo.variables.builtin import BuiltinVariable
    from torch._dynamo.variables.streams import EventVariable, StreamVariable
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    handlers = TorchInGraphFunctionVariable._get_handlers()
    return [
        ("UserDefinedClassVariable.__new__", UserDefinedClassVariable.__new__, "patch_user_defined_class_variable"),
        ("UserDefinedClassVariable._in_graph_classes", UserDefinedClassVariable.__dict__["_in_graph_classes"],
         "patch_user_defined_class_variable"),
        ("BuiltinVariable.call_id", BuiltinVariable.call_id, "patch_builtin_variable"),
        ("EventVariable.python_type", EventVariable.python_type, "patch_stream_event_variable_python_type"),
        ("StreamVariable.python_type", StreamVariable.python_type, "patch_stream_event_variable_python_type"),
        ("the Dynamo handler of the NPU interface's stream()", handlers.get(get_interface_for_device("npu").stream),
         "patch_npu_stream_context"),
        ("torch.utils._triton.has_triton", torch.utils._triton.has_triton, "patch_has_triton"),
    ]


def _wrapped_original(function, name: str):
    """The original that a patch closes over (to tell a patch applied once from one applied on top of itself)."""
    return inspect.getclosurevars(inspect.unwrap(function)).nonlocals.get(name)


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_dynamo_patch_inventory_is_preserved(npu_lazy):
    """Importing torch._dynamo installs every Dynamo patch of torch_npu 2.13, and every way in again adds none twice.

    The NPU device count (> 0) needs a device: test_npu_device_interface_counts_devices.
    """
    import torch
    import torch_npu
    from torch_npu.utils import _dynamo

    npu_lazy.assert_not_loaded("torch._dynamo")
    with npu_lazy.phase("dynamo"):
        import torch._dynamo
    assert npu_lazy.ran(DYNAMO_SETUP), "importing torch._dynamo (phase 'dynamo') did not run the NPU Dynamo set-up"
    with npu_lazy.phase("again"):  # every way in a second time: nothing may be installed twice
        _dynamo._lazy_dynamo_setup()
        _dynamo.add_dynamo_methods_init()
        _dynamo._install_dynamo_post_import_trigger()
        torch.compile(lambda x: x + 1, backend="eager")
        sys.modules["torch_npu._compat.dynamo"].compat_patch_dynamo_optimize()
    missing = [f"{what}: expected the patch of {NPU_DYNAMO}.{installer}, found {defined_at(now)}"
               for what, now, installer in _dynamo_patches(torch, torch_npu)
               if getattr(inspect.unwrap(getattr(now, "__func__", now)), "__module__", None) != NPU_DYNAMO]
    assert not missing, "after phases 'dynamo' and 'again', torch_npu's Dynamo patches are missing:\n  " + \
        "\n  ".join(missing)

    from torch._dynamo.device_interface import get_interface_for_device
    from torch._dynamo.utils import common_constant_types
    from torch._dynamo.variables.builtin import BuiltinVariable
    from torch._dynamo.variables.torch import (TorchInGraphFunctionVariable, constant_fold_functions,
                                               constant_fold_functions_need_guards)
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable
    from torch._functorch._aot_autograd.utils import supports_graphsafe_rng
    from torch_npu.dynamo import trace_rule
    from torch_npu.utils._dynamo_device import NpuInterface

    stacked = [what for what, original in (
        ("UserDefinedClassVariable.__new__", getattr(UserDefinedClassVariable, "__new__raw", None)),
        ("BuiltinVariable.call_id", _wrapped_original(BuiltinVariable.call_id, "origin_call_id")),
    ) if getattr(original, "__module__", None) == NPU_DYNAMO]
    assert not stacked, f"torch_npu's patch of {stacked} wraps its own patch: it was installed twice"
    for device in ("npu", "npu:0", "npu:31"):
        assert get_interface_for_device(device) is NpuInterface, f"{device!r}: {get_interface_for_device(device)}"
    assert {torch.npu.Event, torch.npu.Stream} <= UserDefinedClassVariable._in_graph_classes(), (
        "torch.npu.Event and Stream are not in-graph classes (patch_user_defined_class_variable)")
    handlers = TorchInGraphFunctionVariable._get_handlers()
    accelerator = handlers.get(torch.accelerator.current_stream)
    assert accelerator is None or handlers.get(torch.npu.current_stream) is accelerator, (
        "torch.npu.current_stream has no Dynamo handler (register_npu_current_stream_handler)")
    assert supports_graphsafe_rng(torch.device("npu")), "npu is not registered for graph-safe RNG"
    backends = set(torch._dynamo.list_backends(exclude_tags=None))
    assert {"npu", "npugraph_ex", "npugraphs"} <= backends, f"torch_npu's backends missing from {sorted(backends)}"
    rules = torch._dynamo.trace_rules.torch_name_rule_map
    counts = {name: sum(rule is getattr(trace_rule, name) for rule in rules) for name in (
        "torch_non_c_binding_in_graph_functions_npu", "torch_c_binding_in_graph_functions_npu", "skip_functions_npu")}
    assert set(counts.values()) == {1}, f"torch_npu's trace-rule maps in torch_name_rule_map, by count: {counts}"
    folded = [f for f in (torch.npu.current_device, torch.npu.get_device_properties, torch.npu.is_available)
              if not constant_fold_functions.get(f)]
    assert not folded, f"Dynamo does not constant-fold {folded}"
    assert constant_fold_functions_need_guards.get(torch.npu.current_device), "current_device() folds without a guard"
    assert torch_npu._C._NPUDeviceProperties in common_constant_types, "NPU device properties are no Dynamo constant"
    _assert_optimize_hook(torch)
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    assert not npu_lazy.ran(INDUCTOR_SETUP), "the Dynamo set-up ran the Inductor set-up"


def _assert_optimize_hook(torch) -> None:
    """On torch < 2.15, 2.13's compat layer wraps torch._dynamo.optimize once (master's test expects another module)."""
    from packaging.version import Version

    if Version(torch.__version__).release[:2] >= (2, 15):
        return  # torch's _dynamo_backend_init hook replaces the wrapper there
    optimize = torch._dynamo.optimize
    assert optimize.__module__ == "torch_npu._compat.dynamo", f"torch._dynamo.optimize is {defined_at(optimize)}"
    original = _wrapped_original(optimize, "src_optimize")
    assert getattr(original, "__module__", "").startswith("torch."), f"the optimize hook wraps {defined_at(original)}"


MASTER_ONLY_PATCHES = newer_than_installed("patching SkipFunctionVariable.__new__ and TensorVariable.call_method, "
                                           "and torch._dynamo.optimize from torch_npu.utils._dynamo")


@pytest.mark.skipif(MASTER_ONLY_PATCHES is not None, reason=MASTER_ONLY_PATCHES or "")
@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_master_dynamo_patches(npu_lazy):
    import torch
    import torch._dynamo
    from torch._dynamo.variables.functions import SkipFunctionVariable
    from torch._dynamo.variables.tensor import TensorVariable

    for what, now in (("SkipFunctionVariable.__new__", SkipFunctionVariable.__new__),
                      ("TensorVariable.call_method", TensorVariable.call_method),
                      ("torch._dynamo.optimize", torch._dynamo.optimize)):
        assert getattr(now, "__module__", None) == NPU_DYNAMO, f"{what} is {defined_at(now)}"


@pytest.mark.requires_npu
@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_npu_device_interface_counts_devices(npu_lazy):
    """Needs a device: the NPU interface that the Dynamo set-up registers reports the NPUs."""
    from torch._dynamo.device_interface import get_interface_for_device

    assert npu_lazy.ran(DYNAMO_SETUP), "importing torch._dynamo did not run the NPU Dynamo set-up"
    count = get_interface_for_device("npu").device_count()
    assert count > 0, f"the NPU device interface counts {count} devices on an NPU machine"


# -- the regression zoo for this group ------------------------------------------------------------------------


@pytest.mark.npu_lazy(preload=["torch"])
def test_has_triton_ignoring_the_npu_interface_is_caught(npu_lazy, monkeypatch):
    regressions.has_triton_ignores_npu()
    caught(test_has_triton_preserves_target_device_semantics, npu_lazy, monkeypatch,
                       says=["has_triton(include_cpu=False) is False with ['npu'] available (phase 'npu'), "
                             "expected True",
                             "has_triton is regressions.has_triton_ignores_npu.<locals>.upstream_devices_only."
                             "<locals>.has_triton defined at ", "regressions.py:"])


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_dropped_dynamo_patch_is_caught(npu_lazy):
    regressions.builtin_variable_patch_dropped()
    caught(test_dynamo_patch_inventory_is_preserved, npu_lazy,
                       says=["after phases 'dynamo' and 'again', torch_npu's Dynamo patches are missing",
                             "BuiltinVariable.call_id: expected the patch of torch_npu.utils._dynamo."
                             "patch_builtin_variable, found torch._dynamo.variables.builtin.BuiltinVariable.call_id "
                             "defined at torch/_dynamo/variables/builtin.py:"])

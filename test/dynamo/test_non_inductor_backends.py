"""Backends other than Inductor set up torch_npu's Dynamo integration only, never its Inductor.

``eager``, ``aot_eager``, a user's own callable and torch_npu's ``npu``
backend (torchair) compile without NPU Inductor: no registration, no backend
scope, no ``_lazy_inductor_setup``, no torch_npu._inductor, in the wrapper,
the first call and later calls.

What ``backend="npu"`` does depends on torchair, which torch_npu bundles:
without it, torch_npu < 2.15's ``torch._dynamo.optimize`` hook raises "Could
not find module torchair" while the wrapper is created; with it, but with a
distribution it needs missing (protobuf), the hook raises torchair's import
error there; with everything present it compiles through torchair, which
needs a device for the first call. The expected case is read from the
installed files, never found by trying.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from importlib import metadata
from typing import NamedTuple

import pytest
import regressions
from breakage import caught
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup

pytestmark = needs_deferred_setup

REGISTER = "torch_npu.utils._dynamo:register_inductor_npu"
SCOPE_ENTER = "torch_npu.utils._dynamo:_NpuBackendScope.__enter__"
TRACKED = [REGISTER, SCOPE_ENTER]
LOCAL_BACKENDS = ["eager", "aot_eager", "custom"]


class Torchair(NamedTuple):
    state: str  # "absent" | "unimportable" | "importable"
    why: str
    missing: tuple[str, ...] = ()


def torchair_state() -> Torchair:
    """Whether torch_npu's bundled torchair can import, from torch_npu's files and the installed distributions."""
    spec = importlib.util.find_spec("torch_npu")  # top-level: nothing is imported
    root = os.path.join(spec.submodule_search_locations[0], "dynamo", "torchair")
    if not os.path.isdir(root):
        return Torchair("absent", "torch_npu has no bundled torchair (no dynamo/torchair in its package)")
    with open(os.path.join(root, "__init__.py"), encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    needed = sorted({node.args[0].value for node in ast.walk(tree)
                     if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "version"
                     and node.args and isinstance(node.args[0], ast.Constant)})
    missing = []
    for name in needed:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        return Torchair("unimportable", f"torchair's __init__ reads the version of {', '.join(missing)}, "
                        "not installed", tuple(missing))
    return Torchair("importable", f"torchair and the distributions it checks ({', '.join(needed)}) are installed")


def skip_unless_torchair_imports(what: str = "torchair") -> None:
    """Skip the calling test where torch_npu's bundled torchair (and npugraph_ex, built on it) cannot import."""
    state = torchair_state()
    if state.state != "importable":
        pytest.skip(f"needs torch_npu's bundled {what} to import: {state.why}")


def _model(torch):
    class SinPlusOne(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x) + 1

    return SinPlusOne()


def _assert_no_npu_inductor(npu_lazy, phase: str) -> None:
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    for target in TRACKED:
        count = npu_lazy.calls(target)
        assert count == 0, f"{target} was called {count} time(s) by phase {phase!r}; a non-Inductor backend must not"
    assert not npu_lazy.ran(INDUCTOR_SETUP), f"{INDUCTOR_SETUP} ran by phase {phase!r}"


def _compile_and_run(npu_lazy, backend: str, device: str) -> None:
    with npu_lazy.phase("import"):
        import torch
        import torch_npu  # noqa: F401
    graphs = []

    def custom(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    fn = npu_lazy.compile(_model(torch), backend=custom if backend == "custom" else backend, fullgraph=True)
    _assert_no_npu_inductor(npu_lazy, "wrap")
    assert npu_lazy.ran(DYNAMO_SETUP), f"{DYNAMO_SETUP} did not run when the {backend!r} wrapper was created"
    x = torch.randn(8, device=device)
    fn(x)  # phase first_call, compared with eager
    torch.testing.assert_close(fn(x), _model(torch)(x))  # phase call: no recompilation, same result
    _assert_no_npu_inductor(npu_lazy, "call")
    if backend == "custom":
        assert len(graphs) == 1, f"the custom backend compiled {len(graphs)} graphs for one full graph"


@pytest.mark.npu_lazy(preload=["torch"], track=TRACKED)
@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
def test_non_inductor_compile_backend_matrix(npu_lazy, backend):
    _compile_and_run(npu_lazy, backend, "cpu")


@pytest.mark.npu_lazy(preload=["torch"], track=TRACKED)
def test_npu_backend_without_a_device_sets_up_no_inductor(npu_lazy):
    """``backend="npu"`` on CPU tensors without an NPU: the failure 2.13 gives, and still no NPU Inductor."""
    with npu_lazy.phase("import"):
        import torch
        import torch_npu  # noqa: F401
    if torch.npu.is_available():
        pytest.skip("needs a machine without a usable NPU: here one is usable, and "
                    "test_non_inductor_backends_on_npu covers the npu backend")
    state, why, missing = torchair_state()
    model, x = _model(torch), torch.randn(8)
    if state == "importable":
        fn = npu_lazy.compile(model, backend="npu", fullgraph=True)
        with pytest.raises(Exception, match=r"backend='npu' raised") as excinfo:
            fn(x)
        assert re.search(r"aclInit|207004", str(excinfo.value)), excinfo.value
    else:
        expected = r"Could not find module torchair" if state == "absent" else r"error occurred when import `torchair`"
        with npu_lazy.phase("wrap"), pytest.raises(Exception, match=expected) as excinfo:
            torch.compile(model, backend="npu", fullgraph=True)
        unnamed = [name for name in missing if name not in str(excinfo.value)]
        assert not unnamed, f"{why}, but the error does not name {unnamed}: {excinfo.value}"
    assert npu_lazy.ran(DYNAMO_SETUP), f"{DYNAMO_SETUP} did not run ({why})"
    _assert_no_npu_inductor(npu_lazy, "first_call" if state == "importable" else "wrap")


@pytest.mark.requires_npu
@pytest.mark.npu_lazy(preload=["torch"], track=TRACKED)
@pytest.mark.parametrize("backend", LOCAL_BACKENDS + ["npu"])
def test_non_inductor_backends_on_npu(npu_lazy, backend):
    """Needs a device: the same backends on NPU tensors; ``npu`` compiles through torchair when it imports."""
    torchair = torchair_state()
    if backend == "npu" and torchair.state != "importable":
        pytest.skip(f"needs torch_npu's bundled torchair to import for backend='npu': {torchair.why}")
    _compile_and_run(npu_lazy, backend, "npu")


@pytest.mark.npu_lazy(preload=["torch"], track=TRACKED)
def test_eager_backend_running_the_inductor_setup_is_caught(npu_lazy):
    regressions.optimize_runs_inductor_setup()
    caught(test_non_inductor_compile_backend_matrix, npu_lazy, "eager",
                       says=["'torch_npu._inductor' must not be loaded yet, but it was loaded during phase 'wrap'",
                             "triggered at: torch_npu/utils/_dynamo.py", "in optimize_runs_inductor_setup.<locals>."])

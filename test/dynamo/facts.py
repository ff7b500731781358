"""Facts about the installed torch, torch_npu and Triton, read from their files without importing them.

Expectations that depend on the versions under test (does stock torch
import Triton when Dynamo loads?) are computed here, never hard-coded, so
the suite says the truth on every torch / torch_npu / Triton combination.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata

import pytest
from packaging.version import Version

DYNAMO_SETUP = "torch_npu.utils._dynamo:_lazy_dynamo_setup"
INDUCTOR_SETUP = "torch_npu.utils._dynamo:_lazy_inductor_setup"
#: what `import torch_npu` must leave unloaded
DEFERRED = ("torch._dynamo", "torch._inductor", "torch_npu._inductor", "triton")
#: Ascend-specific Triton code that only the first compiled call may load
ASCEND_TRITON = ("torch_npu._inductor.runtime.triton_helpers", "triton.language.extra.ascend")

#: keyword arguments of ``torch.compile`` that the wrapper checks try, by test id
WRAPPER_KWARGS = {
    "plain": {},
    "enable_shape_handling": {"options": {"enable_shape_handling": True}},
    "npu_backend-default": {"options": {"npu_backend": "default"}},
    "npu_backend-ascendc": {"options": {"npu_backend": "ascendc"}},
    "mode-reduce-overhead": {"mode": "reduce-overhead"},
    "mode-max-autotune": {"mode": "max-autotune"},
    "dynamic": {"dynamic": True},
}


def distribution_version(name: str) -> Version | None:
    try:
        return Version(metadata.version(name))
    except metadata.PackageNotFoundError:
        return None


def torch_npu_version() -> Version | None:
    return distribution_version("torch-npu")


#: the first torch_npu release of each line with the deferred Dynamo / Inductor set-up
#: (``_lazy_dynamo_setup``, ``_lazy_inductor_setup`` and the Dynamo post-import trigger in
#: torch_npu/utils/_dynamo.py), read from the PyPI wheels: 2.10.0 to .post6, 2.11.0 to .post2,
#: 2.12.0 to .post2 and every line before 2.10 import torch._dynamo when torch_npu is imported.
DEFERRED_SETUP_SINCE = {(2, 10): Version("2.10.0.post7"), (2, 11): Version("2.11.0.post3"),
                        (2, 12): Version("2.12.0.post3"), (2, 13): Version("2.13.0")}


def deferred_setup_missing(version: Version | None) -> str | None:
    """Why the deferred-loading guarantees do not apply to this torch_npu release, or None when they do.

    Decided by version, never by trying: a regression that removes the
    deferred set-up must fail the suite, not skip it.
    """
    if version is None:
        return None
    line = version.release[:2]
    oldest, newest = min(DEFERRED_SETUP_SINCE), max(DEFERRED_SETUP_SINCE)
    if line > newest:
        return None
    first = DEFERRED_SETUP_SINCE[oldest] if line < oldest else DEFERRED_SETUP_SINCE[line]
    if version >= first:
        return None
    return (f"needs torch_npu {first} or newer on its line: torch_npu {version} predates the deferred "
            f"Dynamo/Inductor set-up (first in {first}), its `import torch_npu` imports torch._dynamo, so these "
            "guarantees do not apply to it")


#: for the tests of the deferred set-up: skipped, saying why, on a torch_npu release that has none
needs_deferred_setup = pytest.mark.skipif(deferred_setup_missing(torch_npu_version()) is not None,
                                          reason=deferred_setup_missing(torch_npu_version()) or "")


def _package_file(package: str, *parts: str) -> str | None:
    spec = importlib.util.find_spec(package)  # a top-level name: nothing is imported
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], *parts)
    return path if os.path.exists(path) else None


@dataclass(frozen=True)
class ImportTimeCall:
    path: str
    lineno: int
    call: str

    def __str__(self) -> str:
        return f"torch/_dynamo/utils.py:{self.lineno} calls {self.call}() at import"


@lru_cache(maxsize=None)
def dynamo_imports_triton_at_import() -> ImportTimeCall | None:
    """Where stock torch's Dynamo checks for the triton package while Dynamo itself loads.

    A module-level statement of torch/_dynamo/utils.py that calls
    has_triton_package() imports triton as a side effect, so creating an
    Inductor wrapper (which imports Dynamo) loads Triton if it is installed.
    """
    path = _package_file("torch", "_dynamo", "utils.py")
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name == "has_triton_package":
                    return ImportTimeCall(path, node.lineno, name)
    return None


def present(names: tuple[str, ...]) -> tuple[str, ...]:
    """The modules among ``names`` that exist in this environment (found without importing them)."""
    from pytest_npu_lazy.probe.modules import MISSING, lookup

    return tuple(name for name in names if lookup(name)[0] != MISSING)


def triton_installed() -> bool:
    """Whether ``import triton`` succeeds here, as the plugin's ``triton_imports()`` asks it (a fresh interpreter,
    cached per environment): stock torch's ``has_triton_package()`` imports Triton only then, and ``find_spec`` also
    finds a Triton that fails to import (triton-ascend without pybind11)."""
    from pytest_npu_lazy import triton_imports

    return triton_imports()


def triton_ascend_installed() -> bool:
    return distribution_version("triton-ascend") is not None


def stock_torch_loads_triton_at_wrap() -> str | None:
    """The reason, when stock torch loads triton during wrapper creation here; else None."""
    call = dynamo_imports_triton_at_import()
    if call is None or not triton_installed():
        return None
    return (f"stock PyTorch loads triton while the wrapper is created: {call} "
            "(chain: triton <- torch._dynamo.utils <- ... <- torch._dynamo <- torch._inductor <- torch.compile); "
            "not torch_npu's doing. strict: a fix upstream makes this test pass, and then fail, to be noticed")


def triton_ascend_extension_loads_with_triton() -> bool:
    """triton-ascend's `import triton` runs triton.language.extra's loader, which executes every backend."""
    path = _package_file("triton", "language", "extra", "ascend")
    return triton_ascend_installed() and path is not None


def where_defined(obj) -> str:
    """Where a function (or a patched method) was written: ``path:line in qualname``, for failure messages
    about patches, which have no import chain to show."""
    function = getattr(obj, "__func__", obj)
    code = getattr(function, "__code__", None)
    name = getattr(function, "__qualname__", repr(function))
    if code is None:
        return f"{name} (module {getattr(function, '__module__', '?')})"
    parts = code.co_filename.replace(os.sep, "/").split("/")
    for anchor in ("site-packages", "test"):
        if anchor in parts:
            parts = parts[parts.index(anchor) + 1:]
            break
    return f"{'/'.join(parts[-3:])}:{code.co_firstlineno} in {name}"


def npu_kernel_boundary(interpreted: bool = False) -> str | None:
    """Where a first compiled call on ``npu`` tensors stops in this environment, as its error says it; None
    where the kernel can run (a real NPU). Read from the installed files, never by trying.

    On the emulated NPU no kernel runs. torch_npu's generated kernel modules import ``extension`` from
    ``torch_npu._inductor.runtime.triton_helpers``, which defines it only from ``tl.extra.cann``: a
    Triton without ``triton/language/extra/cann`` (triton-ascend 3.2.0, PyPI's) fails that import before
    compiling or interpreting anything. Past it, the emulated NPU's Triton driver refuses every launch.
    """
    from pytest_npu_lazy.cann.common import ENV_MODE

    if os.environ.get(ENV_MODE) != "emulate":
        return None
    helpers = _package_file("torch_npu", "_inductor", "runtime", "triton_helpers.py")
    if helpers is not None and _package_file("triton", "language", "extra", "cann") is None:
        with open(helpers, encoding="utf-8") as handle:
            if "tl.extra.cann.extension" in handle.read():
                return "cannot import name 'extension' from 'torch_npu._inductor.runtime.triton_helpers'"
    return "cannot run kernels"


@lru_cache(maxsize=None)
def dynamo_trace_initialises_accelerator() -> str | None:
    """Where stock torch's Dynamo asks for the current accelerator stream when every trace starts, or None.

    torch 2.13's ``SymbolicStreamState.__init__`` (torch/_dynamo/variables/streams.py) calls
    ``torch.accelerator.current_stream()`` whenever ``torch.accelerator.is_available()``: with an NPU
    present (real or emulated) that initialises the NPU runtime, so a strict ``torch.export`` (a Dynamo
    trace) of a CPU model initialises it once. On a machine without a device nothing is initialised.
    """
    where = _call_inside(("torch", "_dynamo", "variables", "streams.py"), "SymbolicStreamState",
                         "torch.accelerator.current_stream")
    return f"{where} in SymbolicStreamState.__init__" if where else None


@lru_cache(maxsize=None)
def triton_backend_reload_duplicates() -> str | None:
    """Why loading torch_npu's Triton backend a second time in a process fails on a device, or None.

    ``_register_npu_triton_decompositions`` (torch_npu/_inductor/decomposition.py) registers ``aten.erfc``
    each time the Triton backend loads, but removes only the ops of ``DECOMPOSITION_OVERLOAD_OP`` first;
    erfc is not among them. Where a device makes ``has_triton()`` true (a real or emulated NPU with Triton
    installed) a second load, such as switching TORCHINDUCTOR_NPU_BACKEND between two names that both
    load the Triton backend, raises "duplicate registrations for aten.erfc.default". Without a device
    the Triton backend registers nothing, so nothing is duplicated.
    """
    path = _package_file("torch_npu", "_inductor", "decomposition.py")
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        source = handle.read()
    start = source.find("DECOMPOSITION_OVERLOAD_OP = [")
    overloads = source[start:source.find("]", source.find("aten.matmul_backward", start))] if start >= 0 else ""
    if "@register_decomposition([aten.erfc])" in source and "aten.erfc" not in overloads:
        return "duplicate registrations for aten.erfc.default"
    return None


def _function_node(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


@lru_cache(maxsize=None)
def triton_backend_load_not_retryable(module: str) -> str | None:
    """Why a load of torch_npu's Triton backend that fails at the import of ``module`` cannot be retried in that
    process, read from the installed sources; None where it can (or where the construct below is gone).

    ``_load_backend`` (torch_npu/_inductor/__init__.py) resets Inductor's lowerings
    (``restore_inductor_baseline``, torch_npu/_inductor/lowering_patch.py), runs the backend's loader, then imports
    more of torch_npu._inductor and only then records the backend. The Triton loader's
    ``_register_npu_triton_decompositions`` (torch_npu/_inductor/decomposition.py) deletes the ops of
    ``DECOMPOSITION_OVERLOAD_OP`` from Inductor's decomposition table and registers ``aten.erfc``, which that list
    lacks; the reset touches lowerings, never that table. So an import that fails after the loader ran leaves erfc
    registered, and every later load (the retry, and the call after the cause is gone) stops in torch's
    ``register_decomposition`` with "duplicate registrations for aten.erfc.default". Only where the loader
    registers at all: where torch_npu's ``has_triton()`` is true (a real or emulated NPU, Triton installed).
    """
    init = _package_file("torch_npu", "_inductor", "__init__.py")
    decomposition = _package_file("torch_npu", "_inductor", "decomposition.py")
    lowering_patch = _package_file("torch_npu", "_inductor", "lowering_patch.py")
    if None in (init, decomposition, lowering_patch):
        return None
    trees = {}
    for path in (init, decomposition, lowering_patch):
        with open(path, encoding="utf-8") as handle:
            trees[path] = ast.parse(handle.read(), path)
    load = _function_node(trees[init], "_load_backend")
    registrar = _function_node(trees[decomposition], "_register_triton_decompositions")
    if load is None or registrar is None:
        return None
    loader_line = next((call.lineno for call in ast.walk(load)
                        if isinstance(call, ast.Call) and ast.unparse(call.func) == "loader"), None)
    record_line = next((node.lineno for node in ast.walk(load) if isinstance(node, ast.Assign)
                        and any(ast.unparse(target).endswith("._loaded_backend") for target in node.targets)), None)
    relative = "." + module[len("torch_npu._inductor."):] if module.startswith("torch_npu._inductor.") else None
    import_line = next((node.lineno for node in ast.walk(load) if isinstance(node, ast.ImportFrom)
                        and relative and "." * node.level + (node.module or "") == relative), None)
    if None in (loader_line, record_line, import_line) or not loader_line < import_line < record_line:
        return None  # the module is not imported between the loader and the record
    overload, erfc_line = None, None
    for node in ast.walk(registrar):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "DECOMPOSITION_OVERLOAD_OP" for t in node.targets):
            overload = node
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if ast.unparse(decorator) == "register_decomposition([aten.erfc])":
                    erfc_line = decorator.lineno
    if overload is None or erfc_line is None or "aten.erfc" in ast.unparse(overload.value):
        return None
    for name in ("restore_inductor_baseline", "restore_lowering_baseline"):
        function = _function_node(trees[lowering_patch], name)
        if function is None or "decomposition" in ast.unparse(function):
            return None
    restore = _function_node(trees[lowering_patch], "restore_inductor_baseline")
    return (f"torch_npu: a Triton backend load that fails past its loader can never be retried in that process. "
            f"_load_backend runs the loader (torch_npu/_inductor/__init__.py:{loader_line}), imports {module} "
            f"(:{import_line}) and records the backend only after (:{record_line}); the loader registers aten.erfc in "
            f"Inductor's decompositions (torch_npu/_inductor/decomposition.py:{erfc_line}), deleting first only "
            f"DECOMPOSITION_OVERLOAD_OP (decomposition.py:{overload.lineno}), which lacks erfc; "
            f"restore_inductor_baseline (torch_npu/_inductor/lowering_patch.py:{restore.lineno}), run before every "
            "load, resets lowerings, not decompositions. So every later load stops at 'duplicate registrations for "
            "aten.erfc.default' (torch._decomp.register_decomposition)")


@lru_cache(maxsize=None)
def registry_loads_from_a_half_imported_module() -> str | None:
    """Why a first compiled call made while another thread imports ``torch_npu._inductor`` fails, or None.

    ``_InductorNpuRegistry.register_inductor_npu`` (torch_npu/utils/_dynamo.py) imports torch_npu._inductor only
    when the name is not in ``sys.modules``, and otherwise calls ``sys.modules["torch_npu._inductor"]._load_backend()``
    itself. A module another thread is still importing is in ``sys.modules`` already (Python puts it there before
    running it), so the call neither waits for that import (an ``import`` statement would, on the module's lock)
    nor finds ``_load_backend`` before the module's last lines define it. Read from the installed file.
    """
    path = _package_file("torch_npu", "utils", "_dynamo.py")
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    register = next((node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                     and node.name == "register_inductor_npu" and any(
                         isinstance(statement, ast.If) for statement in node.body)), None)
    if register is None:
        return None
    check = next((node for node in ast.walk(register) if isinstance(node, ast.Compare)
                  and ast.unparse(node) == "'torch_npu._inductor' not in sys.modules"), None)
    direct = next((node for node in ast.walk(register) if isinstance(node, ast.Call)
                   and ast.unparse(node.func) == "sys.modules['torch_npu._inductor']._load_backend"), None)
    if check is None or direct is None:
        return None
    return (f"torch_npu: _InductorNpuRegistry.register_inductor_npu asks whether 'torch_npu._inductor' is in "
            f"sys.modules (torch_npu/utils/_dynamo.py:{check.lineno}) and, where it is, calls its _load_backend() "
            f"directly (:{direct.lineno}), without an import that would wait on the module's lock: a module another "
            "thread is importing is in sys.modules before its code has run, so a first compiled call made meanwhile "
            "finds no _load_backend")


@lru_cache(maxsize=None)
def npu_inductor_import_initialises_npu() -> str | None:
    """Where importing ``torch_npu._inductor`` initialises the NPU, or None.

    torch_npu 2.13.0's ``torch_npu/_inductor/config.py`` sets ``is_ascend950 = get_soc_version() >= Ascend950`` at
    module level, and ``get_soc_version`` (torch_npu/npu/_backends.py) starts with ``torch_npu.npu._lazy_init()``:
    so the import, which the first Inductor call makes and which a library may make at its own start-up, initialises
    the NPU where one is present (aclInit, aclrtSetDevice), before any tensor is on it. Read from both files.
    """
    config = _package_file("torch_npu", "_inductor", "config.py")
    if config is None:
        return None
    with open(config, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), config)
    call = next((node for statement in tree.body if not isinstance(statement, (ast.FunctionDef, ast.ClassDef))
                 for node in ast.walk(statement)
                 if isinstance(node, ast.Call) and ast.unparse(node.func) == "get_soc_version"), None)
    where = _call_inside(("torch_npu", "npu", "_backends.py"), "get_soc_version", "torch_npu.npu._lazy_init")
    if call is None or where is None:
        return None
    return (f"torch_npu: torch_npu/_inductor/config.py:{call.lineno} calls get_soc_version() at import, which "
            f"initialises the NPU ({where}: torch_npu.npu._lazy_init())")


@lru_cache(maxsize=None)
def inductor_cache_key_initialises_npu() -> str | None:
    """Where torch_npu's Inductor cache key asks for the current NPU, or None.

    torch_npu 2.13.0 replaces Inductor's ``CacheBase.get_system`` (torch_npu/_compat/inductor.py) with one
    that reads ``torch_npu.npu.get_device_properties(torch_npu.npu.current_device())``; the key is computed
    for every FX graph Inductor compiles, CPU graphs too, so the first Inductor call on CPU tensors
    initialises the NPU (aclInit; on a machine without one, it tries and fails quietly).
    """
    where = _call_inside(("torch_npu", "_compat", "inductor.py"), "get_system", "torch_npu.npu.current_device")
    return f"{where} in get_system (Inductor's cache key)" if where else None


def _call_inside(file: tuple[str, ...], container: str, callee: str) -> str | None:
    """``package/path.py:LINE`` of the first call of ``callee`` inside the class or function ``container``
    of an installed file (read, never imported), or None."""
    path = _package_file(*file)
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == container:
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func) == callee:
                    return f"{'/'.join(file)}:{call.lineno}"
    return None


@lru_cache(maxsize=None)
def triton_ascend_refuses_float64() -> str | None:
    """Why a float64 kernel torch_npu generates for the NPU cannot run, or None where it can.

    triton-ascend's ``cast`` (``triton/triton_patch/language/semantic.py``) raises "[fp8, fp64] is
    unsupported on Ascend for now" for any float64 conversion off the Ascend 950, and torch_npu 2.13.0's
    NPU codegen still writes float64 kernels (a reduction over float64 loads and stores through a cast):
    so a compiled float64 reduction on ``npu`` tensors stops in Triton's language layer, on a real NPU
    and in the interpreter alike. Read from the installed file.
    """
    path = _package_file("triton", "triton_patch", "language", "semantic.py")
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        if "[fp8, fp64] is unsupported on Ascend" not in handle.read():
            return None
    return ("triton-ascend refuses float64 in NPU kernels ('[fp8, fp64] is unsupported on Ascend for now', "
            "triton/triton_patch/language/semantic.py), and torch_npu's NPU codegen still writes them")


@lru_cache(maxsize=None)
def ci_variable_breaks_gelu_fallback() -> str | None:
    """Why compiling ``gelu`` fails where the ``CI`` variable is set and a device is present, or None.

    Where a device makes torch_npu load its Triton backend, ``_register_triton_decompositions``
    (torch_npu/_inductor/decomposition.py) deletes Inductor's decomposition of ``aten.gelu``
    (``DECOMPOSITION_OVERLOAD_OP``) and registers no lowering for it, so Inductor falls back to ATen
    through ``make_fallback``; stock torch's ``make_fallback`` (torch/_inductor/lowering.py) asserts, only
    when ``os.getenv("CI")`` is set, that an op with a decomposition in ``torch._decomp`` gets no fallback.
    GitHub Actions and most CI systems set ``CI``: there, a cold first compile of any graph holding gelu
    fails on an NPU runner (a warm graph cache hides it). Read from both files.
    """
    torch_npu_decomp = _package_file("torch_npu", "_inductor", "decomposition.py")
    lowering = _package_file("torch", "_inductor", "lowering.py")
    if torch_npu_decomp is None or lowering is None:
        return None
    with open(torch_npu_decomp, encoding="utf-8") as handle:
        deletes_gelu = "DECOMPOSITION_OVERLOAD_OP" in (text := handle.read()) and "aten.gelu," in text
    with open(lowering, encoding="utf-8") as handle:
        asserts_in_ci = 'bool(os.getenv("CI"))' in handle.read()
    if not (deletes_gelu and asserts_in_ci):
        return None
    return ("torch_npu's Triton backend deletes Inductor's gelu decomposition and registers no lowering, and "
            "stock torch's make_fallback asserts, where CI is set, that an op with a decomposition gets none")

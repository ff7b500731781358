"""What stock PyTorch releases load, measured per release, and the expectations for the installed one.

The tables come from PyPI's wheel of each release (``nox -s upstream``,
docs/matrix.md): a ``sys.modules`` diff around ``import torch``,
``torch.compile(...)`` and the first call, and the chains this suite
records. Conditions are computed from the installed torch and from whether
triton can be imported, never fixed per run. A release line newer than the
last one measured is judged by the known causes read from its source, so
the suite still says something true the day a new release comes out.
Nothing here imports torch or triton.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from functools import lru_cache
from importlib import metadata

from packaging.version import Version

#: release lines whose PyPI wheel was measured (torch 2.11.0 ... 2.15.0)
MEASURED = ((2, 11), (2, 12), (2, 13), (2, 14), (2, 15))

#: what ``import torch`` loads none of, in every measured release: the compiler front end and back end,
#: Triton, and the symbolic-shape algebra with what it brings (sympy 420 modules, mpmath 51, networkx
#: 285, jinja2 19: the wrapper loads them all, see WRAP_LOADS)
IMPORT_DEFERS = ("torch._dynamo", "torch._inductor", "triton", "sympy", "mpmath", "torch.utils._sympy",
                 "torch.fx.experimental.symbolic_shapes", "networkx", "jinja2")

#: what ``torch.compile(fn, backend="inductor")`` loads before any call, in every measured release, each
#: with the module whose import starts it: torch._inductor comes from torch.compile itself (its
#: compiler_bisector), and Dynamo from Inductor's package (standalone_compile); sympy from Dynamo's utils
#: through torch.fx.experimental.symbolic_shapes
WRAP_LOADS = {"torch._inductor": "torch._inductor.compiler_bisector",
              "torch._dynamo": "torch._dynamo.aot_compile_types",
              "sympy": "torch.fx.experimental.symbolic_shapes"}

#: what waits for the first compiled call in every measured release: the registered "inductor" backend
FIRST_CALL_LOADS = ("torch._dynamo.backends.inductor",)

#: the Triton modules a first compiled call on CPU tensors loads (Inductor's C++ backend needs none): none
#: where no CUDA device is visible; with one (measured on an H200, torch 2.11.0 with triton 3.6.0), Dynamo's
#: tracing asks torch.utils._triton.has_triton_tensor_descriptor_host_tma(), which imports this one
CPU_FIRST_CALL_TRITON = {False: frozenset(), True: frozenset({"triton.tools.tensor_descriptor"})}

#: the modules whose import tries to import triton while the wrapper is created, measured with every
#: ``import triton*`` refused (so each place that asks shows, not just the first): the module whose
#: top-level code asked. Only the first, torch._dynamo.utils (``if has_triton_package(): import triton``),
#: shows in the import chain when triton is installed; the others are why removing that one alone
#: would not keep triton out.
_TRITON_ASKERS_2_11 = frozenset({
    "torch._dynamo.utils",                       # if has_triton_package(): import triton
    "torch._inductor.runtime.triton_compat",     # try: import triton
    "torch.utils.flop_counter",
    "torch._dynamo.repro.after_aot",
    "torch._inductor.ir",
    "torch._inductor.kernel.mm",
})
TRITON_ASKERS_AT_WRAP = {
    (2, 11): _TRITON_ASKERS_2_11,
    (2, 12): _TRITON_ASKERS_2_11,
    (2, 13): _TRITON_ASKERS_2_11,
    # Inductor's template heuristics: tlx.py imports triton, and triton.py asks through autows_utils
    (2, 14): _TRITON_ASKERS_2_11 | {"torch._inductor.heuristics.template.tlx",
                                    "torch._inductor.heuristics.template.triton"},
    # tlx.py no longer asks at import; Inductor's config does (its triton class calls tlx_mode_default())
    (2, 15): _TRITON_ASKERS_2_11 | {"torch._inductor.config", "torch._inductor.heuristics.template.triton"},
}
#: measured with triton installed: every measured release loads it while the wrapper is created
TRITON_AT_WRAP = {line: TRITON_ASKERS_AT_WRAP[line] for line in MEASURED}
#: where the first ask comes from; a newer release still doing this is expected to load triton too
FIRST_ASKER = ("torch._dynamo.utils", ("_dynamo", "utils.py"))


def torch_version() -> Version | None:
    try:
        return Version(metadata.version("torch"))
    except metadata.PackageNotFoundError:
        return None


def torch_line() -> tuple[int, int] | None:
    version = torch_version()
    return None if version is None else version.release[:2]


def triton_importable() -> bool:
    """Whether ``import triton`` succeeds (upstream Triton or triton-ascend), as the plugin's ``triton_imports()``
    asks it: a fresh interpreter, cached per environment; nothing is imported here. ``find_spec`` would also find a
    Triton that fails to import (triton-ascend without pybind11), which torch's ``has_triton_package()`` treats as
    no Triton."""
    from pytest_npu_lazy import triton_imports

    return triton_imports()


def _torch_file(*parts: str) -> str | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], *parts)
    return path if os.path.exists(path) else None


def _imports_triton_at_module_level(path: str) -> int | None:
    """The line of a module-level ``import triton`` (or ``from triton ...``), outside functions and classes."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "triton" for a in node.names):
                return node.lineno
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton" and not node.level:
                return node.lineno
    return None


@lru_cache(maxsize=None)
def first_ask_in_source() -> str | None:
    """``module:line`` where the installed torch's Dynamo utils import triton at module level, if they do."""
    path = _torch_file(*FIRST_ASKER[1])
    line = _imports_triton_at_module_level(path) if path else None
    return None if line is None else f"{FIRST_ASKER[0]}:{line}"


def triton_at_wrap_reason() -> str | None:
    """Why wrapper creation is expected to load triton here, or None where it is expected not to.

    With triton importable: on a measured release line, what was measured; on a newer one, the known
    causes found in its source. Without triton nothing can load it.
    """
    if not triton_importable():
        return None
    line = torch_line()
    if line in TRITON_AT_WRAP:
        cause = f"measured: {len(TRITON_AT_WRAP[line])} modules ask for it, first {FIRST_ASKER[0]}"
    else:
        cause = first_ask_in_source()
        if cause is None:
            return None
        cause = f"read from its source: {cause} imports it at module level"
    return (f"stock PyTorch {'.'.join(map(str, line or ()))} imports triton while the wrapper is created "
            f"({cause}); strict: the day upstream stops, this passes, pytest reports XPASS(strict) as a "
            "failure, and the expectation is to be updated")


class TritonRefused:
    """A finder, first on ``sys.meta_path``, that refuses every ``triton`` import and records who asked.

    An asker is the module whose top-level code (class bodies included) was running: with the import
    refused, each place that asks shows, where an installed triton would show only the first.
    """

    def __init__(self) -> None:
        self.askers: dict[str, str] = {}  # module -> "file:line in function" of the innermost caller

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "triton" and not fullname.startswith("triton."):
            return None
        import sys

        frame, inner = sys._getframe(1), None
        while frame is not None:
            filename = frame.f_code.co_filename
            if "importlib" not in filename and not filename.startswith("<frozen"):
                if inner is None:
                    inner = f"{'/'.join(filename.split(os.sep)[-3:])}:{frame.f_lineno} in {frame.f_code.co_name}"
                if frame.f_code.co_name == "<module>":
                    self.askers.setdefault(frame.f_globals.get("__name__", "?"), inner)
                    break
            frame = frame.f_back
        raise ModuleNotFoundError(f"No module named {fullname!r} (refused by test/upstream)", name=fullname)

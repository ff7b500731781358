"""Questions about module names, answered without importing anything.

``importlib.util.find_spec("torch_npu._inductor")`` would import ``torch_npu``
first, the very thing under observation, so parent packages are looked up
through their search paths instead.
"""

from __future__ import annotations

import difflib
import importlib.machinery
import importlib.util
import pkgutil
import sys

MISSING, MODULE, PACKAGE, OPAQUE = "missing", "module", "package", "opaque"


def lookup(name: str) -> tuple[str, list[str]]:
    """What the import system would find for ``name``, and where its submodules live.

    OPAQUE means submodules cannot be listed without running code (extension
    modules, modules that fill ``sys.modules`` themselves).
    """
    if name in sys.modules:
        module = sys.modules[name]
        if module is None:  # blocked: known to the test, absent to the code under test
            return OPAQUE, []
        path = getattr(module, "__path__", None)
        return (PACKAGE, list(path)) if path is not None else (OPAQUE, [])
    parent, _, _ = name.rpartition(".")
    try:
        if not parent:
            spec = importlib.util.find_spec(name)
        else:
            kind, locations = lookup(parent)
            if kind != PACKAGE:
                return (MISSING if kind == MISSING else OPAQUE), []
            spec = importlib.machinery.PathFinder.find_spec(name, locations)
    except (ImportError, ValueError):
        return MISSING, []
    if spec is None:
        return MISSING, []
    if spec.submodule_search_locations is not None:
        return PACKAGE, list(spec.submodule_search_locations)
    return (MODULE if spec.origin and spec.origin.endswith(".py") else OPAQUE), []


def candidates(name: str) -> list[str]:
    """Full names a person could have meant, at the same depth as ``name``."""
    parent, _, _ = name.rpartition(".")
    depth = name.count(".")
    found = {n for n in sys.modules if n.count(".") == depth and n.startswith(parent)}
    if not parent:
        found |= {m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)
        return sorted(found)
    kind, locations = lookup(parent)
    if kind == PACKAGE:
        found |= {f"{parent}.{m.name}" for m in pkgutil.iter_modules(locations)}
    return sorted(found)


def close_names(name: str, limit: int = 3) -> list[str]:
    return difflib.get_close_matches(name, candidates(name), n=limit, cutoff=0.75)


def unknown_name_problem(name: str) -> str | None:
    """Why ``name`` looks like a typo, or None when it names something real.

    A top-level package that is simply not installed is fine (asserting that
    ``triton`` is not loaded holds where triton is absent) unless an installed
    name is close to it; a submodule missing from an installed package is not.
    """
    if any(ch in name for ch in "*?["):
        return None
    kind, _ = lookup(name)
    if kind != MISSING:
        return None
    parent, _, _ = name.rpartition(".")
    close = close_names(name)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    if not parent:
        if not close:
            return None
        return f"no module named {name!r} is installed.{hint}"
    parent_kind, _ = lookup(parent)
    if parent_kind == MISSING:
        return unknown_name_problem(parent)
    if parent_kind != PACKAGE:
        return None
    return f"package {parent!r} has no module {name!r}.{hint}"

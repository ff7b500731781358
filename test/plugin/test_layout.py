"""The package's shape, as the README describes it: parts in folders, no import cycle, no huge module.

Read from the source with ``ast``, so imports inside functions (the lazy
ones that keep torch out of the pytest process) count as much as the ones
at the top of a module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_npu_lazy"
README = PACKAGE.parent / "README.md"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its code (a package import counts its __init__)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            candidates = [module] + [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            # a module's own packages are imported before it, by the import system: no edge of its making
            if candidate in known and candidate != name and not name.startswith(candidate + "."):
                targets.add(candidate)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def test_no_import_cycle_lazy_imports_included():
    graph = _graph()
    assert _cycles(graph) == [], "import cycles (each list imports itself round the circle)"


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_over_the_limit():
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {name: size for name, size in sizes.items() if size > MAX_LINES} == {}


def test_the_parts_do_not_reach_into_each_other_backwards():
    """The probe and the CANN stub know nothing of isolation or reports; isolation knows nothing of reports."""
    graph = _graph()
    rules = {"pytest_npu_lazy.probe": ("pytest_npu_lazy.isolation", "pytest_npu_lazy.reports.reporter"),
             "pytest_npu_lazy.cann": ("pytest_npu_lazy.isolation", "pytest_npu_lazy.probe", "pytest_npu_lazy.reports"),
             "pytest_npu_lazy.isolation": ("pytest_npu_lazy.reports",),
             "pytest_npu_lazy.reports": ("pytest_npu_lazy.isolation",)}
    broken = sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                    for part, forbidden in rules.items() if name.startswith(part)
                    and any(target == f or target.startswith(f + ".") for f in forbidden))
    assert broken == []


def test_readme_module_map_matches_the_package():
    """Every module is in the README's layout block under its folder, and nothing there is gone."""
    block = re.search(r"## Layout\n+```\n(.*?)```", README.read_text(), flags=re.S)
    assert block, "README has no Layout block"
    listed, folder = set(), ""
    for line in block[1].splitlines():
        if line.startswith("pytest_npu_lazy/"):
            continue
        match = re.match(r"^(  +)(\S+)", line)
        if not match:
            continue
        indent, entry = len(match[1]), match[2]
        if indent == 2:
            folder = entry if entry.endswith("/") else ""
            if not folder:
                listed.add(entry)
        elif folder:
            listed.add(folder + entry)
    actual = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
              if path.name not in ("__init__.py", "__main__.py")}
    assert sorted(actual - listed) == [], "modules missing from the README's Layout block"
    assert sorted(p for p in listed - actual if p.endswith(".py")) == [], "README lists modules that are gone"


@pytest.mark.parametrize("module", ["pytest_npu_lazy.plugin", "pytest_npu_lazy"])
def test_plugin_imports_no_torch_at_load(module):
    import subprocess
    import sys

    code = (f"import sys, {module}; heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'torch_npu', 'triton')); print(heavy); sys.exit(1 if heavy else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr

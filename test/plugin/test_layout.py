"""The package's shape, as docs/development.md describes it: parts in folders, layers that import only downwards,
no import cycle, no huge module.

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
#: the page whose Layout section maps the package, module by module
LAYOUT_PAGE = PACKAGE.parent / "docs" / "development.md"
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
        if isinstance(node, ast.ImportFrom) and module in known and module != name and any(
                f"{module}.{alias.name}" not in known for alias in node.names):
            targets.add(module)  # ``from .. import __version__``: a name its package's __init__ defines
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


#: The package's layers, lowest first. A module may import its own layer and the layers below it, never one
#: above: no arrow runs back up.
#:
#: - foundation: exceptions, the pytest internals, the version, torch's build and where to get it, the
#:   process's role, ``--shard K/N`` (shared by the mutation pass and the selection map); they import nothing
#:   of the package.
#: - cann: the CANN host stub and the emulated NPU. It runs before torch is imported, in any process, and
#:   needs nothing but the foundation.
#: - probe: what a test loaded, when and why (the recorder, the fixture, the typed Summary and the default
#:   watch list). It reads the CANN mode's names; the settings it is made from arrive as an argument
#:   (ProbeState.for_settings), never as an import.
#: - settings: the one owner of configuration (ini, env, command line, marker -> TestSettings); it takes the
#:   default watch list from the probe and the CANN modes from cann.
#: - forks: the fork-server engine both front ends share (channel, serve loop, reaping).
#: - reports, isolation, python_c: the two front ends and the reports, side by side; see SIBLINGS_APART.
#: - selection: change-driven selection; its tracer observes run_python calls and writes through the reports'
#:   atomic write, so it sits above the front ends.
#: - plugin: the pytest hooks, wiring everything below to pytest: the entry point and one plugin per feature.
#: - the package itself: its __init__ names the public API (NpuLazy, run_python) and loads it on first use,
#:   so it sits on top, and no module inside imports a name from it (hence version.py at the bottom).
LAYERS = (
    ("foundation", ("errors", "compat", "version", "torch_build", "torch_source", "site_chain", "role",
                    "shard")),
    ("cann", ("cann",)),
    ("probe", ("probe",)),
    ("settings", ("settings",)),
    ("forks", ("forks",)),
    ("front ends and reports", ("reports", "isolation", "python_c")),
    ("selection", ("selection",)),
    ("plugin", ("plugin", "plugins")),
    ("tools run beside pytest", ("mutate",)),
    ("the package's public names", ("",)),
)

#: Parts of one layer that must not import each other: results reach the reports as report data, never
#: through the front ends' code, and the two front ends share only the fork engine (forks/).
SIBLINGS_APART = {
    "reports": ("isolation", "python_c", "forks"),
    "isolation": ("reports", "python_c"),
    "python_c": ("reports", "isolation"),
}


def _part(module: str) -> str:
    """``pytest_npu_lazy.probe.state`` -> ``probe``; the package itself -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def _within(module: str, parts) -> bool:
    return any(module == f"pytest_npu_lazy.{p}" or module.startswith(f"pytest_npu_lazy.{p}.") for p in parts)


def _arrows_back_up(graph: dict[str, set[str]]) -> list[str]:
    rank = {part: index for index, (_, parts) in enumerate(LAYERS) for part in parts}
    broken = []
    for name, targets in graph.items():
        for target in targets:
            if rank[_part(target)] > rank[_part(name)]:
                broken.append(f"{name} ({LAYERS[rank[_part(name)]][0]}) -> {target} ({LAYERS[rank[_part(target)]][0]})")
            elif _part(name) in SIBLINGS_APART and _within(target, SIBLINGS_APART[_part(name)]):
                broken.append(f"{name} -> {target} (siblings kept apart)")
    return sorted(broken)


def test_every_module_is_in_a_layer():
    rank = {part for _, parts in LAYERS for part in parts}
    assert sorted({_part(name) for name in _graph()} - rank) == [], "a new part: place it in LAYERS"


def test_no_arrow_runs_back_up():
    """No module of a lower layer imports one of a higher layer, lazy imports included (see LAYERS)."""
    assert _arrows_back_up(_graph()) == []


def test_the_layer_check_finds_an_arrow_back_up(tmp_path):
    """The check sees the arrows it exists for: settings taking the watch list from reports, the probe
    reaching into isolation, reports into isolation, and a name read from the package's __init__."""
    graph = {"pytest_npu_lazy.settings": {"pytest_npu_lazy.reports.schema"},
             "pytest_npu_lazy.probe.state": {"pytest_npu_lazy.isolation.child_side.child"},
             "pytest_npu_lazy.reports.reporter": {"pytest_npu_lazy.isolation.messages"},
             "pytest_npu_lazy.python_c.call": {"pytest_npu_lazy.isolation.pytest_side.pool"},
             "pytest_npu_lazy.forks.server": {"pytest_npu_lazy.isolation.messages"},
             "pytest_npu_lazy.reports.schema": set(), "pytest_npu_lazy.isolation.child_side.child": set(),
             "pytest_npu_lazy.isolation.messages": set(), "pytest_npu_lazy.isolation.pytest_side.pool": set()}
    assert _arrows_back_up(graph) == [
        "pytest_npu_lazy.forks.server (forks) -> pytest_npu_lazy.isolation.messages (front ends and reports)",
        "pytest_npu_lazy.probe.state (probe) -> pytest_npu_lazy.isolation.child_side.child (front ends and reports)",
        "pytest_npu_lazy.python_c.call -> pytest_npu_lazy.isolation.pytest_side.pool (siblings kept apart)",
        "pytest_npu_lazy.reports.reporter -> pytest_npu_lazy.isolation.messages (siblings kept apart)",
        "pytest_npu_lazy.settings (settings) -> pytest_npu_lazy.reports.schema (front ends and reports)",
    ]
    module = tmp_path / "reporter.py"
    module.write_text("def version():\n    from .. import __version__\n    return __version__\n")
    known = {"pytest_npu_lazy", "pytest_npu_lazy.reports", "pytest_npu_lazy.reports.reporter"}
    assert _imports("pytest_npu_lazy.reports.reporter", module, known) == {"pytest_npu_lazy"}


def test_readme_module_map_matches_the_package():
    """Every module is in the layout block of docs/development.md under its folder, and nothing there is gone."""
    text = LAYOUT_PAGE.read_text()
    block = re.search(r"```\n(.*?)```", text[text.index("\n## Layout\n"):], flags=re.S) if "\n## Layout\n" in text else None
    assert block, "docs/development.md has no Layout block"
    listed: set[str] = set()
    folders: list[tuple[int, str]] = []  # the open folders, outermost first, with their indents
    for line in block[1].splitlines():
        if line.startswith("pytest_npu_lazy/"):
            continue
        match = re.match(r"^(  +)(\S+)", line)
        if not match:
            continue
        indent, entry = len(match[1]), match[2]
        while folders and folders[-1][0] >= indent:
            folders.pop()
        if entry.endswith("/"):
            folders.append((indent, entry))
        else:
            listed.add("".join(folder for _, folder in folders) + entry)
    actual = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
              if path.name not in ("__init__.py", "__main__.py")}
    assert sorted(actual - listed) == [], "modules missing from the Layout block of docs/development.md"
    assert sorted(p for p in listed - actual if p.endswith(".py")) == [], "docs/development.md lists modules that are gone"


@pytest.mark.parametrize("module", ["pytest_npu_lazy.plugin", "pytest_npu_lazy", "pytest_npu_lazy.role"]
                         + [f"pytest_npu_lazy.plugins.{p.stem}" for p in sorted((PACKAGE / "plugins").glob("*.py"))
                            if p.stem != "__init__"])
def test_plugin_imports_no_torch_at_load(module):
    import subprocess
    import sys

    # NumPy too: every zygote is forked from the process that loaded the plugin, so what the plugin loads is in each
    # baseline (a test asserting that something defers NumPy would start contaminated), and OpenBLAS's threads
    # spin in the pytest process
    code = (f"import sys, {module}; heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'torch_npu', 'triton', 'numpy')); print(heavy); sys.exit(1 if heavy else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


#: packages whose docstring names every module in them (isolation's and python_c's follow their split into
#: the fork engine and the pytest / zygote / child sides)
DOCUMENTED_PACKAGES = ("", "plugins", "probe", "reports", "cann", "forks", "isolation", "isolation/pytest_side",
                       "isolation/zygote_side", "isolation/child_side", "python_c")


@pytest.mark.parametrize("package", DOCUMENTED_PACKAGES, ids=lambda p: p or "pytest_npu_lazy")
def test_package_docstring_names_each_of_its_modules(package):
    folder = PACKAGE / package if package else PACKAGE
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
    parts = [path.stem for path in folder.glob("*.py") if path.name != "__init__.py"]
    parts += [path.name for path in folder.iterdir() if (path / "__init__.py").is_file()]
    parts += [path.name for path in folder.glob("*.c")]
    named = set(re.findall(r"`\.?([\w.]+)`", doc))
    assert sorted(p for p in parts if p not in named) == [], f"modules the docstring of {folder.name}/ does not name"

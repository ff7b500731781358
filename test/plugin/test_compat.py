"""pytest's internals are used in pytest_npu_lazy/compat.py and nowhere else in the package.

The check reads the package's source (ast, no import): an ``import _pytest...``,
``importlib.import_module("_pytest...")`` or an access to a known private
attribute of a pytest object outside compat.py fails, naming file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_npu_lazy

PACKAGE = Path(pytest_npu_lazy.__file__).resolve().parent
COMPAT = PACKAGE / "compat.py"

#: private attributes of pytest's objects (Session, Config, Item, FixtureRequest, CaptureManager,
#: TerminalReporter, TempPathFactory, PytestPluginManager, ...) that the plugin could be tempted by
PRIVATE_PYTEST_ATTRIBUTES = frozenset({
    "_setupstate", "_tw", "_global_capturing", "_method", "_tmp_path_factory", "_basetemp",
    "_given_basetemp", "_get_multicapture", "_capturing", "_inicache", "_getini", "_inipath",
    "_opt2dest", "_parser", "_fixturemanager", "_arg2fixturedefs", "_fixtureinfo", "_pyfuncitem",
    "_request", "_store", "_name2plugin", "_initialpaths", "_node_cache", "_collection_cache",
    "_numcollected", "_progress_nodeids_reported", "_main_color", "_known_types", "_tw_markup",
    "_conftest_plugins", "_getconftestmodules", "_report_sections", "_nodeid", "_initini",
    "_xfailed", "_skipped_by_mark", "_notfound", "_bestrelpathcache", "_collection_pkg_roots",
})


def private_uses(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: what`` for each use of a pytest internal in ``source``."""
    found = []

    def add(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{node.lineno}: {what}")

    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "_pytest":
                    add(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] == "_pytest":
                add(node, f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if node.attr in PRIVATE_PYTEST_ATTRIBUTES and owner not in ("self", "cls"):
                add(node, f".{node.attr}")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            value = node.args[0].value
            if name in ("import_module", "__import__") and str(value).split(".")[0] == "_pytest":
                add(node, f"{name}({value!r})")
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in PRIVATE_PYTEST_ATTRIBUTES):
            add(node, f"{node.func.id}(..., {node.args[1].value!r})")
    return found


def test_only_compat_uses_pytest_internals():
    sources = sorted(p for p in PACKAGE.rglob("*.py") if p != COMPAT)
    assert len(sources) > 20, f"the package's modules were not found under {PACKAGE}"
    uses = [use for path in sources
            for use in private_uses(path.read_text(), str(path.relative_to(PACKAGE.parent)))]
    assert not uses, "pytest internals outside pytest_npu_lazy/compat.py (move them there):\n" + "\n".join(uses)


def test_compat_is_where_the_internals_are():
    """The list above still names what compat.py really uses (else the check above proves nothing)."""
    uses = "\n".join(private_uses(COMPAT.read_text(), "compat.py"))
    for expected in ("_pytest.capture", "_pytest.junitxml", "_pytest._io", "import _pytest.main",
                     "._setupstate", "._tw", "._global_capturing", "'_tmp_path_factory'", "._basetemp"):
        assert expected in uses, f"{expected} not found by the check in compat.py:\n{uses}"


@pytest.mark.parametrize("snippet", [
    "import _pytest.main",
    "import _pytest",
    "from _pytest.reports import TestReport",
    "from _pytest import junitxml",
    "def f():\n    from _pytest.outcomes import Exit",
    "importlib.import_module('_pytest.capture')",
    "item.session._setupstate.teardown_exact(None)",
    "width = reporter._tw.fullwidth",
    "getattr(config, '_tmp_path_factory', None)",
    "capman._global_capturing = None",
])
def test_the_check_catches(snippet):
    assert private_uses(snippet), f"not caught: {snippet!r}"


@pytest.mark.parametrize("snippet", [
    "import pytest\npytest.TestReport",
    "from .. import compat\ncompat.teardown_exact(item, None)",
    "self._tw = writer",
    "frames = ('/_pytest/',)",
    "from ._pytest_helpers import x",
])
def test_the_check_lets_pass(snippet):
    assert private_uses(snippet) == []


def test_xdist_queue_read_where_it_is_and_nothing_where_it_is_not():
    """compat.xdist_queued_items: the worker's queued items in order (the shutdown marker is no item); None where
    there is no WorkerInteractor or its queue is of another shape."""
    import contextlib
    import types

    from pytest_npu_lazy import compat

    class Queue:
        def __init__(self, entries):
            self.entries = entries

        @contextlib.contextmanager
        def lock(self):
            yield self.entries

    class WorkerInteractor:
        def __init__(self, torun):
            self.torun = torun
            self.session = types.SimpleNamespace(items=["a", "b", "c", "d"])

    def config_with(*plugins):
        return types.SimpleNamespace(pluginmanager=types.SimpleNamespace(get_plugins=lambda: list(plugins)))

    shutdown = object()
    assert compat.xdist_queued_items(config_with(WorkerInteractor(Queue([2, 0, shutdown])))) == ["c", "a"]
    assert compat.xdist_queued_items(config_with(object())) is None
    assert compat.xdist_queued_items(config_with(WorkerInteractor(object()))) is None
    assert compat.xdist_queued_items(config_with(WorkerInteractor(types.SimpleNamespace(lock=None)))) is None

"""Every skip in the suites says what is missing and how to get it: its reason starts with "needs ".

A skip that says less ("not today", "torch 2.13.0 has no X") reads, in CI's
``-rs`` list, like a test that simply does not matter; one that starts with
"needs" names the device, the package, the release or the network access
that would make the test run (``needs a real NPU device: ...``, ``needs
pytest-xdist, which is not installed``, ``needs network access to ...``).

Read from the source with ``ast``: every ``pytest.skip(...)``,
``pytest.mark.skip(reason=...)`` and ``pytest.mark.skipif(..., reason=...)``
of test/plugin, test/dynamo and test/upstream (test code written inside
strings, for pytester, is not the suites' own). A reason computed elsewhere
(a name bound in the module, a helper function's returns, ``x or ""``) is
followed to the strings it can be; one that cannot be followed fails too.
``pytest.importorskip`` is left alone: pytest's own reason names the module.
"""

from __future__ import annotations

import ast
from pathlib import Path


TEST = Path(__file__).resolve().parents[1]
SUITES = ("plugin", "dynamo", "upstream")
#: test modules that are pytester input, never collected themselves: their skips are outcomes other tests expect
PYTESTER_INPUT = {"plugin/outcome_kinds.py"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _reason_argument(call: ast.Call) -> ast.expr | None:
    keyword = next((k.value for k in call.keywords if k.arg in ("reason", "msg")), None)
    name = _name(call.func)
    if name in ("pytest.skip", "pytest.skip.Exception", "pytest.mark.skip"):
        return call.args[0] if call.args else keyword
    if name == "pytest.mark.skipif":
        return keyword
    return None


class Reasons:
    """The skip reasons of a set of modules, each followed to the strings it can be."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.trees = {path: ast.parse(text, path) for path, text in sources.items()}
        self.functions = {node.name: node for tree in self.trees.values() for node in ast.walk(tree)
                          if isinstance(node, ast.FunctionDef)}

    def texts(self, node: ast.expr | None, tree: ast.Module, scope: ast.AST, depth: int = 0) -> list[str | None]:
        """The leading text of each string ``node`` can be; None for one that cannot be followed."""
        if depth > 5 or node is None:
            return [None]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value] if node.value else []  # "": the reason of a skipif whose condition is false
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            return [first.value if isinstance(first, ast.Constant) else None]
        if isinstance(node, ast.BoolOp):
            return [text for value in node.values for text in self.texts(value, tree, scope, depth + 1)]
        if isinstance(node, ast.Name):
            bound = [n.value for where in (scope, tree) for n in ast.walk(where) if isinstance(n, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)]
            return [text for value in bound for text in self.texts(value, tree, scope, depth + 1)] or [None]
        if isinstance(node, ast.Call) and _name(node.func).split(".")[-1] in self.functions:
            function = self.functions[_name(node.func).split(".")[-1]]
            returns = [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None
                       and not (isinstance(n.value, ast.Constant) and n.value.value is None)]
            return [text for value in returns for text in self.texts(value, tree, function, depth + 1)] or [None]
        return [None]

    def unexplained(self) -> list[str]:
        """``path:line: reason`` of every skip whose reason does not start with "needs "."""
        found = []
        for path, tree in self.trees.items():
            scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            for scope in scopes:
                for call in ast.walk(scope):
                    if not isinstance(call, ast.Call) or _reason_argument(call) is None:
                        continue
                    for text in self.texts(_reason_argument(call), tree, scope):
                        if text is None or not text.startswith("needs "):
                            found.append(f"{path}:{call.lineno}: {text if text is not None else ast.unparse(call)}")
        return sorted(set(found))


def _suite_sources() -> dict[str, str]:
    sources = {}
    for suite in SUITES:
        for path in sorted((TEST / suite).rglob("*.py")):
            name = str(path.relative_to(TEST))
            if name not in PYTESTER_INPUT:
                sources[name] = path.read_text()
    return sources


def test_every_skip_names_what_is_missing():
    reasons = Reasons(_suite_sources())
    assert len(reasons.trees) > 40
    assert reasons.unexplained() == [], 'skips whose reason does not start with "needs " (say what is missing)'


def test_the_check_sees_a_skip_that_names_nothing():
    module = '''
import pytest

NOT_YET = "not today"

def why(version):
    if version > 2:
        return None
    return f"torch {version} has no export"

@pytest.mark.skipif(True, reason=why(1) or "")
def test_a():
    pytest.skip("needs a real NPU device: none here")

def test_b():
    pytest.skip(NOT_YET)

@pytest.mark.skip(reason=f"needs {'x'}, which is not installed")
def test_c():
    message = "no chromium"
    pytest.skip(message)
'''
    assert Reasons({"case.py": module}).unexplained() == [
        "case.py:11: torch ", "case.py:16: not today", "case.py:21: no chromium"]


SKIP_MARKED_WITH_A_PRELOAD_THAT_FAILS = """
import pytest

@pytest.mark.skip(reason="needs nothing: marked skip")
@pytest.mark.npu_lazy(preload=["no_such_module_npu_lazy"])
def test_marked_skip():
    pass

@pytest.mark.skipif(True, reason="needs nothing: a true skipif")
@pytest.mark.npu_lazy(preload=["no_such_module_npu_lazy"])
def test_true_skipif():
    pass

@pytest.mark.skipif(False, reason="needs nothing: a false skipif")
@pytest.mark.npu_lazy(preload=["no_such_module_npu_lazy"])
def test_false_skipif_runs():
    pass
"""


def test_a_skip_marked_test_starts_no_child_so_its_zygote_cannot_turn_the_skip_into_an_error(run_pytest, pytester):
    """A test its own marks skip is skipped in-process before any fixture, as pytest skips it: no zygote is prepared
    for it, so a preload that cannot import (torch_npu under --npu-lazy-cann=off without CANN) leaves it skipped."""
    pytester.makepyfile(test_marks=SKIP_MARKED_WITH_A_PRELOAD_THAT_FAILS)
    run = run_pytest("-p", "npu_lazy", "-rs")
    assert run.outcomes == {"test_marks.py::test_marked_skip": "skipped", "test_marks.py::test_true_skipif": "skipped",
                            "test_marks.py::test_false_skipif_runs": "error"}, run.text()
    assert "needs nothing: marked skip" in run.text() and "needs nothing: a true skipif" in run.text()
    assert "no_such_module_npu_lazy" in run.text(), "the test that runs still meets its preload"

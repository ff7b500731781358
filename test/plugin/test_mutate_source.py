"""A mutant reaches code that compiles a function's source again, as Triton's interpreter does.

Triton's interpreter (and its JIT) does not run a ``@triton.jit`` function's
code object: it reads the function's source through ``inspect`` and compiles
that. The hook changes the code the module runs; unless it changes the text
``inspect`` reads too, such a function runs unmutated (its mutants survive,
reported as holes in the tests) and unprobed (its mutants are called
unreached). ``recompiled`` below is that reader, in a few lines.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_npu_lazy.mutate import operators, source_text
from pytest_npu_lazy.mutate.hook import ENV, Plan
from pytest_npu_lazy.mutate.runs import SITE_DIR

LIBRARY = '''\
import inspect
import textwrap


def recompiled(fn):
    """Like Triton's interpreter: the function compiled again from the source text inspect finds."""
    lines, _ = inspect.getsourcelines(fn)
    namespace = {}
    exec(compile(textwrap.dedent("".join(lines[1:])), inspect.getsourcefile(fn), "exec"), fn.__globals__, namespace)
    return namespace[fn.__name__]


@recompiled
def scale(x):
    """Doubles x.

    A docstring of several lines, as torch_npu's helpers have.
    """
    return x * 2


def after():
    return "after"
'''

TARGETS = {"srclib": ["scale", "after"]}


def _run(tmp_path: Path, mode: str, mutant_id: str | None, code: str) -> tuple[str, Path]:
    (tmp_path / "srclib.py").write_text(LIBRARY)
    log_dir = tmp_path / "log"
    log_dir.mkdir(exist_ok=True)
    env = dict(os.environ, **{ENV: Plan(mode, TARGETS, mutant_id, str(log_dir)).to_json()},
               PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout, log_dir


def _mutant(operator: str, line_text: str) -> operators.Mutant:
    line = LIBRARY.splitlines().index(line_text) + 1
    [mutant] = [m for m in operators.generate(LIBRARY, "srclib", {"scale"})
                if m.operator == operator and m.line == line and "3" in m.description]
    return mutant


def test_a_mutant_in_a_function_compiled_from_its_source_runs_mutated(tmp_path):
    mutant = _mutant("change-constant", "    return x * 2")
    code = "import inspect, srclib; print(srclib.scale(5)); print(inspect.getsource(srclib.after).strip())"
    out, log_dir = _run(tmp_path, "mutant", mutant.id, code)
    lines = out.splitlines()
    assert lines[0] == "15", f"the recompiled function ran the file's text, not the mutant ({mutant.id}): {out}"
    assert lines[1:] == ["def after():", '    return "after"'], out  # the definitions below keep their lines
    assert not list(log_dir.glob("unplaced-*"))


def test_the_coverage_probe_fires_in_a_function_compiled_from_its_source(tmp_path):
    _, log_dir = _run(tmp_path, "trace", None, "import srclib; srclib.scale(1)")
    names = {line.split(" ", 2)[2] for f in log_dir.glob("hits-*") for line in f.read_text().splitlines()}
    assert "srclib:scale" in names, names
    assert "srclib:after" not in names, names


def test_a_changed_definition_keeps_its_first_line_and_one_too_long_is_named():
    original = "import x\n\n\n@deco\ndef f(a):\n    return (a +\n            1)\n\n\ndef g():\n    return 2\n"
    tree = ast.parse(original)
    tree.body[1].body[0].value.right = ast.Constant(5)
    lines, unplaced = source_text.module_lines(original, ast.fix_missing_locations(tree))
    assert unplaced == []
    assert "".join(lines[3:7]) == "@deco\ndef f(a):\n    return a + 5\n\n", lines
    assert lines[9:] == original.splitlines(keepends=True)[9:]  # g where it was

    tree = ast.parse(original)
    tree.body[2].body[:0] = [ast.Expr(ast.Constant(1))] * 3  # g grows by three lines it does not have
    lines, unplaced = source_text.module_lines(original, ast.fix_missing_locations(tree))
    assert unplaced == ["g"]
    assert lines == original.splitlines(keepends=True)


def test_an_unplaced_definition_is_said_where_its_mutant_survives(tmp_path):
    from pytest_npu_lazy.mutate.runs import SuiteRun
    from pytest_npu_lazy.mutate.session import MutationPass

    mutant = _mutant("change-constant", "    return x * 2")
    run = SuiteRun(0, 1.0, [], 1, [], "", ["srclib:scale"])
    result = MutationPass._classify(None, mutant, run, 1)  # type: ignore[arg-type]  # reads no state
    assert result.status.value == "survived"
    assert "original text of srclib:scale" in result.message, result.message


def test_the_file_is_never_touched(tmp_path):
    mutant = _mutant("change-constant", "    return x * 2")
    _run(tmp_path, "mutant", mutant.id, "import srclib")
    assert (tmp_path / "srclib.py").read_text() == LIBRARY


#: a module, and the return statement (by its path of bodies) whose ``(1 + 2)`` becomes ``1 + 5``
INNERMOST = {
    "a method alone, not its class": ("class K:\n    x = 1\n\n    def f(self):\n        return (1 +\n                2)\n\n"
                                      "    def g(self):\n        return (3 +\n                4)\n", (0, 1, 0)),
    "a def under an if, not the if": ("import sys\nif sys:\n    def f():\n        return (1 +\n                2)\n"
                                      "else:\n    f = None\n", (1, 0, 0)),
}


@pytest.mark.parametrize("case", list(INNERMOST))
def test_the_innermost_changed_statement_is_rewritten_alone(case):
    original, path = INNERMOST[case]
    tree = ast.parse(original)
    node = tree
    for index in path:
        node = node.body[index]
    node.value.right = ast.Constant(5)
    lines, unplaced = source_text.module_lines(original, ast.fix_missing_locations(tree))
    assert unplaced == []
    assert "".join(lines) == original.replace("(1 +\n                2)", "1 + 5\n"), "".join(lines)


def test_a_definition_without_its_decorator_starts_where_its_code_object_says():
    import inspect
    import linecache

    original = "import functools\n\n\n@functools.lru_cache(None)\ndef f(a):\n    return a + 1\n"
    tree = ast.parse(original)
    tree.body[1].decorator_list = []
    lines, _ = source_text.module_lines(original, ast.fix_missing_locations(tree))
    path = "/nonexistent/decorated_module.py"
    source_text.serve_to_source_readers(path, lines)
    namespace: dict = {}
    exec(compile(tree, path, "exec"), namespace)
    try:
        assert lines[namespace["f"].__code__.co_firstlineno - 1] == "def f(a):\n", lines  # no search back needed
        assert inspect.getsource(namespace["f"]) == "def f(a):\n    return a + 1\n"
    finally:
        linecache.cache.pop(path, None)


def _first_lines(lines: list[str], tree: ast.Module) -> dict[str, str]:
    """Each function's name -> the text on the line its code object starts at (what inspect reads first)."""
    namespace: dict = {}
    exec(compile(tree, "<m>", "exec"), namespace)
    found = {}
    for value in namespace.values():
        for function in [value, *vars(value).values()] if isinstance(value, type) else [value]:
            code = getattr(getattr(function, "fget", function), "__code__", None)
            if code is not None:
                found[code.co_name + str(code.co_firstlineno)] = lines[code.co_firstlineno - 1].strip()
    return found


def test_statements_are_matched_by_place_not_name_and_a_class_attribute_moves_no_method():
    original = ("class K:\n    x = (1 +\n         2)\n\n    @property\n    def v(self):\n        return (1 +\n                2)\n\n"
                "    @v.setter\n    def v(self, value):\n        self._v = (value +\n                   0)\n\n"
                "    def g(self):\n        return 3\n")
    tree = ast.parse(original)
    tree.body[0].body[1].body[0].value.right = ast.Constant(5)  # the getter, not the setter of the same name
    tree.body[0].body[0].value.right = ast.Constant(7)  # a class attribute
    lines, unplaced = source_text.module_lines(original, ast.fix_missing_locations(tree))
    text = "".join(lines)
    assert unplaced == []
    assert "return 1 + 5" in text and "self._v = (value +" in text and "x = 1 + 7" in text, text
    assert text.count("\n") == original.count("\n")
    for first_line in _first_lines(lines, tree).values():
        assert first_line.startswith(("def ", "@")), (first_line, text)
    assert "def g(self):" in lines[14], lines  # the method after them where it was


def test_lines_are_counted_as_the_parser_counts_them_and_tabs_stay_tabs():
    original = "x = 1  # \x0c a form feed in a comment\nclass K:\n\tdef f(self):\n\t\treturn (1 +\n\t\t\t2)\n"
    tree = ast.parse(original)
    tree.body[1].body[0].body[0].value.right = ast.Constant(5)
    lines, unplaced = source_text.module_lines(original, ast.fix_missing_locations(tree))
    assert unplaced == []
    assert lines[:3] == [line + "\n" for line in original.split("\n")[:3]] and lines[3].strip() == "return 1 + 5", lines
    assert lines[2] == "\tdef f(self):\n", lines  # the class's own indentation kept: the method reads as Triton reads it
    compile(textwrap.dedent("".join(lines[2:4])), "<f>", "exec")


def test_the_served_text_survives_a_cleared_linecache():
    import linecache

    path = "/nonexistent/served_module.py"
    source_text.serve_to_source_readers(path, ["def f():\n", "    return 5\n"])
    try:
        linecache.clearcache()  # as torch's compile workers do
        assert linecache.getlines(path) == ["def f():\n", "    return 5\n"]
    finally:
        source_text._SERVED.pop(path, None)
        linecache.cache.pop(path, None)

"""The text of a module as it runs under a mutant (or the coverage probes), for code that reads source.

The hook compiles a changed tree, but some code does not run a function's
code object: it reads the function's *source* and compiles that again.
Triton's interpreter is one (``InterpretedFunction`` rewrites the function it
finds through ``inspect.getsourcelines``), Triton's JIT another, and so is
this project's check of the combine functions it bridges. Through
``linecache`` they read the file on disk: a mutant in a ``@triton.jit``
function would run unmutated, survive, and be reported as a hole in the
tests; a coverage probe there would never fire, and its mutants would be
called unreached.

:func:`module_lines` writes each changed definition (the innermost: a method,
not its whole class) back over its own lines (``ast.unparse``, padded with blank lines), so every definition
still starts on the line its code object names and ``inspect`` finds it
there; :func:`serve_to_source_readers` puts those lines in ``linecache``,
marked as a loader's (no modification time), which ``checkcache`` keeps.
"""

from __future__ import annotations

import ast
import copy as copy_module
import linecache

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _span(node: ast.stmt) -> tuple[int, int]:
    """First and last line of a definition, decorators included (where its code object starts)."""
    first = min([node.lineno, *(decorator.lineno for decorator in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


def module_lines(original: str, changed: ast.Module) -> tuple[list[str], list[str]]:
    """The original's lines with each definition that ``changed`` alters rewritten in place: the innermost
    one that holds the change, so a class's other methods keep their text and lines.

    Returns the lines and the names of changed definitions whose new text is longer than their old span
    (rare: ``ast.unparse`` writes a statement on one line); those keep their old text, and the caller says so.
    """
    lines = original.splitlines(keepends=True)
    unplaced: list[str] = []
    _rewrite(ast.parse(original).body, changed.body, lines, unplaced, "")
    return lines, unplaced


def _rewrite(old_body: list, new_body: list, lines: list[str], unplaced: list[str], prefix: str) -> None:
    before = {node.name: node for node in old_body if isinstance(node, _DEFINITIONS)}
    for node in new_body:
        if not isinstance(node, _DEFINITIONS):
            continue
        old = before.get(node.name)
        if old is None or ast.dump(old) == ast.dump(node):
            continue
        if isinstance(node, ast.ClassDef) and isinstance(old, ast.ClassDef) and _same_but_members(old, node):
            _rewrite(old.body, node.body, lines, unplaced, prefix + node.name + ".")
            continue
        first, last = _span(old)
        start = max(first, _span(node)[0])  # where the new code object starts: past a dropped decorator
        room = last - start + 1
        text = ast.unparse(node).splitlines()
        if len(text) > room:  # a probe's line more than the lines it has: its docstrings make the room
            text = ast.unparse(_without_docstrings(node)).splitlines()
        if len(text) > room:
            unplaced.append(prefix + node.name)
            continue
        indent = len(lines[first - 1]) - len(lines[first - 1].lstrip())
        lines[first - 1:last] = ["\n"] * (start - first) + [" " * indent + line + "\n" for line in text] + [
            "\n"] * (room - len(text))


def _same_but_members(old: ast.ClassDef, new: ast.ClassDef) -> bool:
    """The two classes differ only inside their methods and nested classes: each can be rewritten alone."""
    if len(old.body) != len(new.body) or ast.dump(ast.ClassDef(old.name, old.bases, old.keywords, [],
                                                             old.decorator_list)) != ast.dump(
            ast.ClassDef(new.name, new.bases, new.keywords, [], new.decorator_list)):
        return False
    return all(isinstance(a, _DEFINITIONS) and isinstance(b, _DEFINITIONS) and a.name == b.name
               or ast.dump(a) == ast.dump(b) for a, b in zip(old.body, new.body))


def _without_docstrings(node: ast.stmt) -> ast.stmt:
    """A copy of ``node`` whose functions and classes have no docstring: what reads the text compiles it,
    and a docstring there changes nothing it runs, while ``ast.unparse`` gives it a line per line of text."""
    copy = copy_module.deepcopy(node)
    for inner in ast.walk(copy):
        body = getattr(inner, "body", None)
        if isinstance(inner, _DEFINITIONS) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            inner.body = body[1:] or [ast.Expr(ast.Constant(...))]
    return copy


def serve_to_source_readers(path: str, lines: list[str]) -> None:
    """Make ``inspect``/``linecache`` answer ``lines`` for ``path`` in this process (and its forks)."""
    linecache.cache[path] = (sum(len(line) for line in lines), None, lines, path)

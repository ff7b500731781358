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

:func:`module_lines` writes each changed statement (the innermost: a method,
not its whole class) back over its own lines (``ast.unparse``, padded with blank lines), so every definition
still starts on the line its code object names and ``inspect`` finds it
there; :func:`serve_to_source_readers` puts those lines in ``linecache``,
marked as a loader's (no modification time), which ``checkcache`` keeps.
"""

from __future__ import annotations

import ast
import copy as copy_module
import io
import linecache

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: fields holding a block of statements: a compound statement whose header is unchanged is looked into
_BLOCKS = ("body", "orelse", "finalbody")
#: path -> the lines served for it in this process (put back if something clears linecache)
_SERVED: dict[str, list[str]] = {}


def _span(node: ast.stmt) -> tuple[int, int]:
    """First and last line of a statement, decorators included (where a definition's code object starts)."""
    first = min([node.lineno, *(decorator.lineno for decorator in getattr(node, "decorator_list", ()))])
    return first, node.end_lineno or node.lineno


def module_lines(original: str, changed: ast.Module) -> tuple[list[str], list[str]]:
    """The original's lines with each statement that ``changed`` alters rewritten over its own lines: the
    innermost one that holds the change (a method, not its class; a function defined under an ``if``, not the
    ``if``), so every other statement keeps its text and lines.

    Statements are matched by where they start (an edit keeps the location of what it replaces); one the
    change added (a probe in a class body) has no place of its own and is left out of the text. Returns the
    lines and the names of changed statements whose new text is longer than their old span even without
    docstrings (rare: ``ast.unparse`` writes a statement on one line); those keep their old text, and the
    caller says so.
    """
    lines = io.StringIO(original).readlines()  # "\n" only, as the parser counts lines (not str.splitlines)
    unplaced: list[str] = []
    _rewrite(ast.parse(original).body, changed.body, lines, unplaced, "")
    return lines, unplaced


def _rewrite(old_body: list, new_body: list, lines: list[str], unplaced: list[str], prefix: str) -> None:
    before = {(node.lineno, node.col_offset, type(node)): node for node in old_body}
    for node in new_body:
        old = before.get((getattr(node, "lineno", None), getattr(node, "col_offset", None), type(node)))
        if old is None or ast.dump(old) == ast.dump(node):
            continue
        name = prefix + getattr(node, "name", f"<line {old.lineno}>")
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _same_header(old, node):
            inner = name + "." if isinstance(node, ast.ClassDef) else prefix
            for field in _BLOCKS:
                _rewrite(getattr(old, field, []), getattr(node, field, []), lines, unplaced, inner)
            for old_handler, handler in zip(getattr(old, "handlers", []), getattr(node, "handlers", [])):
                _rewrite(old_handler.body, handler.body, lines, unplaced, inner)
            continue
        _place(old, node, lines, unplaced, name)


def _same_header(old: ast.stmt, new: ast.stmt) -> bool:
    """The two differ only inside their blocks (and those blocks have the same statements' places)."""
    def header(node: ast.stmt) -> str:
        blank = copy_module.copy(node)
        for field in _BLOCKS:
            if hasattr(blank, field):
                setattr(blank, field, [])
        handlers = getattr(node, "handlers", None)
        if handlers is not None:
            blank.handlers = [ast.ExceptHandler(h.type, h.name, []) for h in handlers]  # type: ignore[attr-defined]
        return ast.dump(blank)

    return header(old) == header(new)


def _place(old: ast.stmt, node: ast.stmt, lines: list[str], unplaced: list[str], name: str) -> None:
    first, last = _span(old)
    start = max(first, _span(node)[0])  # where the new code object starts: past a dropped decorator
    room = last - start + 1
    text = ast.unparse(node).splitlines()
    if len(text) > room:  # a probe's line more than the lines it has: its docstrings make the room
        text = ast.unparse(_without_docstrings(node)).splitlines()
    if len(text) > room:
        unplaced.append(name)
        return
    line = lines[first - 1]
    indent = line[:len(line) - len(line.lstrip())]  # tabs stay tabs
    lines[first - 1:last] = ["\n"] * (start - first) + [indent + text_line + "\n" for text_line in text] + [
        "\n"] * (room - len(text))


def _without_docstrings(node: ast.stmt) -> ast.stmt:
    """A copy of ``node`` whose functions and classes have no docstring: what reads the text compiles it,
    and a docstring there changes nothing it runs, while ``ast.unparse`` gives it a line per line of text."""
    copy = copy_module.deepcopy(node)
    for inner in ast.walk(copy):
        if isinstance(inner, _DEFINITIONS) and ast.get_docstring(inner, clean=False) is not None:
            inner.body = inner.body[1:] or [ast.Expr(ast.Constant(...))]
    return copy


def serve_to_source_readers(path: str, lines: list[str]) -> None:
    """Make ``inspect``/``linecache`` answer ``lines`` for ``path`` in this process (and its forks), also after
    ``linecache.clearcache()`` (torch's compile workers call it): a reader then reloads it, and gets these."""
    _SERVED[path] = lines
    _cache(path)
    if not getattr(linecache.updatecache, "_npu_lazy_served", False):
        original = linecache.updatecache

        def updatecache(filename, module_globals=None):
            if filename not in _SERVED:
                return original(filename, module_globals)
            return _cache(filename)

        updatecache._npu_lazy_served = True  # type: ignore[attr-defined]
        linecache.updatecache = updatecache


def _cache(path: str) -> list[str]:
    """Put the served lines of ``path`` in ``linecache`` as a loader's entry (no modification time, which
    ``checkcache`` keeps), and return them."""
    lines = _SERVED[path]
    linecache.cache[path] = (sum(len(line) for line in lines), None, lines, path)
    return lines

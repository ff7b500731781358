"""The watched packages' sources: where they are, what each file is (git blob id), and its functions.

A map names files as a change names them: relative to the directory that holds the package
(``torch_npu/utils/_dynamo.py``), so a path in a diff of torch_npu's repository and a file of the
installed wheel meet. A file is identified by its git blob id, the hash ``git diff --full-index``
prints on its ``index`` line, so a diff can be checked against the sources a map was taken on.

Nothing here imports a watched package: :func:`importlib.util.find_spec` of a top-level name
only searches ``sys.path``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path

#: the scope of a line outside every function: it runs when its module is imported
MODULE_SCOPE = "<module>"


class SelectionError(Exception):
    """A map, a change or an option the selection cannot use; the message names the fix."""


def package_roots(names: tuple[str, ...]) -> dict[str, Path]:
    """Each watched top-level package's directory, found without importing it."""
    roots = {}
    for name in names:
        if not name.isidentifier():
            raise SelectionError(f"ini npu_lazy_map_packages: {name!r} is not a top-level package name; "
                                 "name packages such as torch_npu, one per line.")
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SelectionError(f"the watched package {name!r} is not installed here (no package of that name on "
                                 "sys.path): install it, or name another in ini npu_lazy_map_packages.")
        roots[name] = Path(list(spec.submodule_search_locations)[0]).resolve()
    return roots


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's content (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class FileFacts:
    """One source file of a watched package, as the map keeps it."""

    blob: str
    lines: int
    #: (qualified name, first body line, last line) of each function, outermost first; None: not parsed
    functions: tuple[tuple[str, int, int], ...] | None = None

    def to_dict(self) -> dict:
        data: dict = {"blob": self.blob, "lines": self.lines}
        if self.functions is not None:
            data["functions"] = [list(f) for f in self.functions]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "FileFacts":
        functions = data.get("functions")
        return cls(str(data["blob"]), int(data["lines"]),
                   None if functions is None else tuple((str(n), int(a), int(b)) for n, a, b in functions))


def inventory(roots: dict[str, Path], parse: set[str]) -> dict[str, FileFacts]:
    """Every ``.py`` file of the watched packages by map path; the functions of those in ``parse``."""
    files = {}
    for root in roots.values():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            name = path.relative_to(root.parent).as_posix()
            data = path.read_bytes()
            functions = functions_of(data) if name in parse else None
            files[name] = FileFacts(git_blob_id(data), data.count(b"\n") + (not data.endswith(b"\n") and bool(data)),
                                    functions)
    return files


def functions_of(source: bytes) -> tuple[tuple[str, int, int], ...] | None:
    """The functions of a module's source with the lines their *bodies* span.

    A ``def`` line, its decorators and its default values run where the function is defined (the
    enclosing scope), not when it is called, so they belong to the enclosing scope; the body runs
    only in a call. None where the source does not parse (every line then counts for the whole file).
    """
    try:
        with warnings.catch_warnings():  # the package's own invalid escapes: its warnings, not this run's
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.body[0].lineno, child.end_lineno or child.body[-1].lineno))
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(found)


def scope_of(functions: tuple[tuple[str, int, int], ...], line: int) -> tuple[str, int, int] | None:
    """The innermost function whose body holds ``line``; None: module scope."""
    inner = None
    for function in functions:
        if function[1] <= line <= function[2] and (inner is None or function[1] >= inner[1]):
            inner = function
    return inner

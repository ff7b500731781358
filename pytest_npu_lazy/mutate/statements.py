"""What a statement does, as the mutation operators need to know it: text for people, a record of state,
work that can fail, the names it binds and reads.

Kept apart from :mod:`.operators`, which decides the edits: these are questions about Python statements, the
``record-before-work`` operator's above all (a record moved ahead of the work it records must not read a name
before the statement that binds it).
"""

from __future__ import annotations

import ast
from typing import Iterator


#: calls whose arguments are text for people, never behaviour
TEXT_CALLS = {"warn", "info", "debug", "warning", "warnings", "error", "exception", "critical", "log", "format"}


def call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def is_text_for_people(stmt: ast.stmt) -> bool:
    """Logging, warnings and raise: deleting or editing them changes only what a person reads."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return call_name(stmt.value) in TEXT_CALLS
    return False


#: methods that add to or take from a container: a call of one records state, as an assignment to an item does
#: (``sys.meta_path.remove(trigger)`` records that the trigger fired)
RECORDING_METHODS = {"add", "append", "extend", "update", "setdefault", "insert", "__setitem__", "remove",
                      "discard"}


def own_statements(node: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function's own body, not of the functions and classes defined in it."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(child))


def records_state(stmt: ast.stmt, declared: set[str]) -> bool:
    """An assignment to an attribute, an item or a global/nonlocal name, or a container's add: state that
    outlives the statement, which a later call may read to decide that something was done."""
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = stmt.targets if isinstance(stmt, (ast.Assign, ast.Delete)) else [stmt.target]
        return any(isinstance(t, (ast.Attribute, ast.Subscript)) or (isinstance(t, ast.Name) and t.id in declared)
                   for t in targets)
    if isinstance(stmt, ast.If) and not stmt.orelse:  # ``if trigger in hooks: hooks.remove(trigger)``
        return not any(isinstance(node, ast.Call) for node in ast.walk(stmt.test)) \
            and all(records_state(inner, declared) for inner in stmt.body)
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
        and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr in RECORDING_METHODS


def does_work(stmt: ast.stmt) -> bool:
    """A statement that can fail while doing something: an import, or a call anywhere in it (a nested
    function's body aside), text for people aside."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Return, ast.Raise, ast.Pass,
                         ast.Global, ast.Nonlocal)) or is_text_for_people(stmt):
        return False
    return any(isinstance(node, (ast.Call, ast.Import, ast.ImportFrom)) for node in own_statements(stmt)) \
        or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)


def binds(statements) -> set[str]:
    """Names the statements bind: assigned, imported, defined, or bound by a loop, ``with`` or ``except``."""
    names = set()
    for stmt in statements:
        for node in [stmt, *own_statements(stmt)]:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
    return names


def reads(*statements) -> set[str]:
    return {node.id for stmt in statements for node in [stmt, *own_statements(stmt)]
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}

"""Reading a kernel's source for :mod:`.layouts` and :mod:`.addresses`: the values the reading gives names (a block's
layout, a scalar tied to an axis's sub-blocks), where a call's arguments are, the loop count an index-codegen
kernel computes, and which names a loop carries from one iteration to the next or leaves for after it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

SUFFIX = "BLOCK_SUB"


class Disqualified(Exception):
    """One axis keeps its sub-blocks; the others may still widen."""

    def __init__(self, axis: str, reason: str) -> None:
        super().__init__(reason)
        self.axis, self.reason = axis, reason


class Refused(Exception):
    """The whole kernel runs as launched."""


@dataclass(frozen=True)
class Tile:
    """A block-shaped value: the axis each position holds (None: size 1). ``arange_of``: an axis's ``arange`` (and
    ``[None, :]`` views of it); ``index_of``: an axis's index (its arange plus fixed scalars, or its sub-block
    offset), ``looped`` when that offset moves from one loop iteration to the next."""

    axes: tuple
    arange_of: str | None = None
    index_of: str | None = None
    looped: bool = False


@dataclass(frozen=True)
class Marked:
    """A scalar tied to an axis's sub-blocks: its ``BLOCK_SUB`` ("sub"), loop count, loop variable or offset."""

    kind: str
    axis: str
    extent: str = ""


SCALAR = "scalar"  # fixed within a program
LOOPED = "looped"  # changes from one loop iteration to the next
MODULE = "module"


def axis_of(name: str) -> str:
    return name[: -len(SUFFIX)].lower()


NOT_CONSTANT = object()


def argument(node: ast.Call, position: int, keyword: str) -> ast.expr:
    if len(node.args) > position:
        return node.args[position]
    found = next((k.value for k in node.keywords if k.arg == keyword), None)
    if found is None:
        raise Refused(f"{ast.unparse(node)[:80]}: its {keyword} not where this check reads it")
    return found


def constant_axis(node: ast.Call, position: int):
    value = node.args[position] if len(node.args) > position else next(
        (k.value for k in node.keywords if k.arg in ("axis", "dim")), None)
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return None
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) and isinstance(value.operand, ast.Constant) \
            and type(value.operand.value) is int:
        return -value.operand.value
    if isinstance(value, ast.Constant) and type(value.value) is int:
        return value.value
    return NOT_CONSTANT


def loop_count(node: ast.BinOp) -> tuple[str, str] | None:
    """``(EXTENT + SUB - 1) // SUB``: (SUB, EXTENT), both names, else None."""
    if not (isinstance(node.op, ast.FloorDiv) and isinstance(node.right, ast.Name)):
        return None
    minus = node.left
    if not (isinstance(minus, ast.BinOp) and isinstance(minus.op, ast.Sub) and isinstance(minus.right, ast.Constant)
            and minus.right.value == 1 and isinstance(minus.left, ast.BinOp) and isinstance(minus.left.op, ast.Add)):
        return None
    extent, sub = minus.left.left, minus.left.right
    if isinstance(extent, ast.Name) and isinstance(sub, ast.Name) and sub.id == node.right.id:
        return sub.id, extent.id
    return None


def carried_or_read_after(function: ast.FunctionDef, loop: ast.For, axis: str) -> None:
    """No value assigned in the loop is read before it is assigned in an iteration, or read outside the loop."""
    written = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    carried = read_before_written(loop.body, {loop.target.id} if isinstance(loop.target, ast.Name) else set(),
                                  written)
    if carried:
        raise Disqualified(axis, f"{sorted(carried)[0]} is carried from one of {axis}'s sub-blocks to the next")
    inside = {id(n) for n in ast.walk(loop)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and id(node) not in inside and node.id in written:
            raise Disqualified(axis, f"{node.id}, assigned in {axis}'s loop, is used outside it")


def read_before_written(statements: list[ast.stmt], defined: set[str], written: set[str]) -> set[str]:
    carried: set[str] = set()
    for statement in statements:
        if isinstance(statement, ast.For):
            carried |= reads_of(statement.iter, defined, written)
            inner = defined | ({statement.target.id} if isinstance(statement.target, ast.Name) else set())
            carried |= read_before_written(statement.body, inner, written)
        elif isinstance(statement, ast.If):
            carried |= reads_of(statement.test, defined, written)
            after_body, after_else = set(defined), set(defined)
            carried |= read_before_written(statement.body, after_body, written)
            carried |= read_before_written(statement.orelse, after_else, written)
            defined |= after_body & after_else
        else:
            value = getattr(statement, "value", None)
            targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
            if isinstance(statement, ast.AugAssign):
                carried |= reads_of(statement.target, defined, written, load_only=False)
            if value is not None:
                carried |= reads_of(value, defined, written)
            for target in targets:
                if target is not None:
                    defined |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return carried


def reads_of(node: ast.AST, defined: set[str], written: set[str], load_only: bool = True) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and (isinstance(n.ctx, ast.Load) or not load_only)
            and n.id in written and n.id not in defined}


def positions(function: ast.FunctionDef, axes: set[str]) -> list[str]:
    """The axes in the order of their positions in the blocks (read from each axis's ``base[None, :, ...]``)."""
    found: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                isinstance(node.slice, ast.Tuple) and node.value.id.startswith("base_"):
            for position, element in enumerate(node.slice.elts):
                if isinstance(element, ast.Slice):
                    found.setdefault(node.value.id[len("base_"):], position)
    return sorted(axes, key=lambda a: found.get(a, -1))

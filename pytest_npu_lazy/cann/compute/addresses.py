"""Where an index-codegen kernel loads and stores, for :mod:`.layouts`: each address in a canonical form, the masks
that bound an axis to its extent, and which axes every access is masked by.

A store's address must be a pointer argument plus axis indices, each times integer constants and parameters (a
dynamic shape's strides), plus fixed scalars: ``in_out_ptr0 + (x2 + 2048*y1 + 262144*z0)`` is
``((x2, ()), (y1, ("2048",)), (z0, ("262144",)))``. The launch reads the coefficients with its sizes and checks
that the address gives every element of a program's block its own (:func:`.widening.widths`). A pointer the kernel
stores to must be loaded and stored at that one address, and is used nowhere but at the start of an address.
"""

from __future__ import annotations

import ast
import re

from .kernel_text import SUFFIX, Disqualified, Marked, Refused, Tile, argument

#: Inductor's names for a kernel's pointer arguments
POINTER = re.compile(r"(in_out_ptr|in_ptr|out_ptr)\d+$")


class Accesses:
    """The loads and stores of :class:`.layouts.Layouts` (a mixin: it shares the reading's values)."""

    env: dict[str, object]
    parameters: set[str]
    candidates: set[str]
    assigned: set[str]
    extents: dict[str, str]
    offsets: dict[str, tuple]  # index name -> (axis, the program offset's name, None, or "?")
    bounding: dict[str, str]  # mask name -> the axis it bounds to its extent
    masked: set[str] | None  # the axes every load and store is masked to their extents by
    loaded: dict[str, set]  # pointer -> the canonical addresses it is loaded at (None: unreadable)
    addresses: dict[str, set]  # pointer -> the canonical addresses it is stored at
    stores: set
    in_address: bool

    counts: dict[str, int]  # how many times the kernel assigns each name
    definitions: dict[str, str | None]  # index name -> its definition as read (None: not readable)

    def value(self, node: ast.expr, in_range: bool = False) -> object:
        raise NotImplementedError  # the reading's (Layouts)

    def forget(self, name: str) -> None:
        """A name assigned again: what was known of it as an index or a mask no longer holds."""
        self.offsets.pop(name, None)
        self.bounding.pop(name, None)
        self.definitions.pop(name, None)

    def facts(self) -> tuple[dict, dict, dict]:
        return dict(self.offsets), dict(self.bounding), dict(self.definitions)

    def restore(self, facts: tuple) -> None:
        self.offsets, self.bounding, self.definitions = (dict(f) for f in facts)

    def combine(self, operands: list, op, node: ast.AST) -> object:
        raise NotImplementedError  # the reading's (Layouts)

    def note_index_or_mask(self, name: str, node: ast.expr, value: object) -> None:
        """Remember an axis's index (and the program offset added to it) and a mask that bounds the index to its
        extent: ``a < a_numel`` of an index with no offset, ``a < min(ABLOCK + a_offset, a_numel)`` of one offset
        by ``a_offset``. A store under such a mask writes at most ``extent`` of the axis's indices."""
        self.forget(name)
        if isinstance(value, Tile) and value.index_of:
            others = [t for t in _summands(node) if not isinstance(self.value(t), (Tile, Marked))]
            offset = None if not others else others[0].id if len(others) == 1 and isinstance(others[0], ast.Name) \
                else "?"
            if any(self.counts.get(n.id, 0) > 1 for t in others for n in ast.walk(t) if isinstance(n, ast.Name)):
                offset = "?"  # a name assigned twice: its value where the index is used is not read here
            self.offsets[name] = (value.index_of, offset)
            self.definitions[name] = ast.dump(node) if offset != "?" else None
            return
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt) and
                isinstance(node.left, ast.Name) and node.left.id in self.offsets):
            return
        axis, offset = self.offsets[node.left.id]
        extent, bound = self.extents.get(axis), node.comparators[0]
        if offset is None and isinstance(bound, ast.Name) and bound.id == extent:
            self.bounding[name] = axis
        elif isinstance(bound, ast.Call) and ast.unparse(bound.func) == "min" and len(bound.args) == 2 and any(
                sorted(ast.unparse(t) for t in _summands(a)) == sorted([str(extent), str(offset)])
                for a in bound.args):
            self.bounding[name] = axis

    def memory(self, name: str, node: ast.Call) -> object:
        address = argument(node, 0, "pointer")
        others = [self.value(a) for a in (*node.args[1:], *(k.value for k in node.keywords))]
        pointer, canonical = self.address(address)
        where = self.value_of_address(address)
        position = 1 if name == "load" else 2
        mask = node.args[position] if len(node.args) > position else next(
            (k.value for k in node.keywords if k.arg == "mask"), None)
        bounded = sorted({self.bounding[m.id] for m in (_conjuncts(mask) if mask is not None else [])
                          if isinstance(m, ast.Name) and m.id in self.bounding})
        self.masked = set(bounded) if self.masked is None else self.masked & set(bounded)
        if name == "load":
            self.loaded.setdefault(pointer, set()).add(canonical)
            return self.combine([where, *others], None, node)
        if canonical is None:
            raise Refused(f"a store's address that is not {pointer} plus axis indices times constants")
        self.addresses.setdefault(pointer, set()).add(canonical)
        self.stores.add((tuple((axis, factors) for axis, factors, _ in canonical[0]), tuple(bounded)))
        held = {axis for axis, _, _ in canonical[0]}
        for axis in sorted(self.candidates - held):
            raise Disqualified(axis, f"a store's address does not depend on {axis}")
        return self.combine([where, *others], None, node)

    def value_of_address(self, address: ast.expr) -> object:
        self.in_address = True
        try:
            return self.value(address)
        finally:
            self.in_address = False

    def address(self, address: ast.expr) -> tuple[str, tuple | None]:
        """(pointer, canonical form: ((axis, coefficient), ...), fixed scalar terms) of ``pointer + terms``; the
        form is None where a term is anything else."""
        terms = _summands(address)
        pointers = [t for t in terms if isinstance(t, ast.Name) and t.id in self.parameters and
                    POINTER.fullmatch(t.id)]
        named = {n.id for n in ast.walk(address) if isinstance(n, ast.Name) and POINTER.fullmatch(n.id)}
        if len(pointers) != 1 or len(named) != 1:
            raise Refused(f"{ast.unparse(address)[:80]}: an address that is not one pointer argument plus an offset")
        axes, fixed = [], []
        for term in terms:
            if term is pointers[0]:
                continue
            factors = _operands(term, ast.Mult)
            indices = [(f, tile) for f in factors if isinstance(f, ast.Name) and
                       isinstance(tile := self.env.get(f.id), Tile)]
            definition = self.definitions.get(indices[0][0].id) if len(indices) == 1 else None
            if len(indices) == 1 and indices[0][1].index_of and definition and all(
                    f is indices[0][0] or self.fixed(f) for f in factors):
                coefficient = tuple(sorted(str(f.value) if isinstance(f, ast.Constant) else getattr(f, "id", "")
                                           for f in factors if f is not indices[0][0]))
                axes.append((indices[0][1].index_of, coefficient, definition))
            elif self.fixed(term):
                fixed.append(ast.dump(term))
            else:
                return pointers[0].id, None
        if len({axis for axis, _, _ in axes}) != len(axes):
            return pointers[0].id, None
        # the form compares loads with stores (each index with its definition); the launch needs axes and factors
        return pointers[0].id, (tuple(sorted(axes)), tuple(sorted(fixed)))

    def fixed(self, node: ast.expr) -> bool:
        """An integer constant or a parameter the kernel never assigns: a coefficient the launch can read."""
        return (isinstance(node, ast.Constant) and type(node.value) is int) or (
            isinstance(node, ast.Name) and node.id in self.parameters and node.id not in self.assigned
            and not POINTER.fullmatch(node.id) and not node.id.endswith(SUFFIX))


def _operands(node: ast.expr, operator: type) -> list[ast.expr]:
    """The operands of ``a OP b OP c`` (the expression itself where it is not one)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, operator):
        return _operands(node.left, operator) + _operands(node.right, operator)
    return [node]


def _summands(node: ast.expr) -> list[ast.expr]:
    """The terms of ``a + b + c``."""
    return _operands(node, ast.Add)


def _conjuncts(node: ast.expr) -> list[ast.expr]:
    """The operands of ``a & b & c``."""
    return _operands(node, ast.BitAnd)

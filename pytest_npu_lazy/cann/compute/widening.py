"""A kernel's loops over sub-blocks of a pointwise axis, run wide where that provably changes no value.

torch_npu's index codegen writes a kernel's block as nested loops, one per axis, over sub-blocks of
``<A>BLOCK_SUB`` elements (a compile-time constant of the launch):

    base_x2 = tl.arange(0, X2BLOCK_SUB)
    loops_x2 = (x2_numel + X2BLOCK_SUB - 1) // X2BLOCK_SUB
    for loop_x2 in range(loops_x2):
        x2 = (loop_x2 * X2BLOCK_SUB) + base_x2[None, None, None, :]
        x2_mask = x2 < x2_numel
        ...

Triton's interpreter runs each iteration as Python over one sub-block; its cost is per iteration, not per
element. torch_npu's ``test_sum_add.py`` sums (32, 64, 128, 2048) float32 over its first axis in 32
programs of 2,048 iterations each, about a million interpreted operations. Launched with a wider
``X2BLOCK_SUB`` (a power-of-two multiple of it), the same loop covers the same elements in fewer iterations:
``loop * SUB + arange(SUB)`` over ``ceil(extent / SUB)`` iterations, masked to the extent, is every index of
the extent once whatever ``SUB`` is. Each element is computed by the same operations on the same values
exactly when nothing in the kernel relates two elements along a widened axis, which is read from the source
before it is allowed, axis by axis:

- the axis's ``BLOCK_SUB`` is a parameter used only for its ``tl.arange``, its loop count
  ``(EXTENT + SUB - 1) // SUB`` (``EXTENT`` a parameter), its offset ``loop * SUB`` and the sizes of shapes;
  its loop variable only in that offset, its ``arange`` only in that index;
- the layout of every block-shaped value (which axis each position holds) is followed through the kernel:
  no reduction or scan runs along the axis, a reshape only adds or drops positions of size 1 (the others keep
  their order), nothing permutes, transposes, sorts, gathers, joins or multiplies blocks, and no two axes meet
  in one position;
- every store's address depends on the axis (two sub-blocks never write the same element), a pointer loaded
  and stored is read and written at the same offset expression, and no value computed in the loop is carried
  into the next iteration or read after the loop;
- only Triton's language, its math, torch's and torch_npu's helpers that this module lists, and Python's
  ``min``/``max`` on scalars are called; no atomics; at run time, no two tensor arguments share memory.

A reduction along another axis gives the same bits for a wide block as for a narrow one because a float sum
is taken in an order that depends on the reduced row only (:func:`.reductions.accumulate`). ``BLOCK_SUB``
grows in powers of two up to the extent, innermost axis first, while the block (every ``BLOCK_SUB`` of the
kernel multiplied) stays within :data:`~.batching.MAX_BLOCK_ELEMENTS` and the loop touches the same indices as
launched (``ceil(extent / SUB) * SUB`` of them: nothing beyond what the launch as given computed, loaded or
stored, whatever the kernel masks). Each launch's ledger entry says what
was widened (``sub-blocks widened: x2 256 -> 2048, y1 1 -> 4: 2048 iterations as 64``) or why not.
``PYTEST_NPU_LAZY_SUBBLOCKS_AS_LAUNCHED=1`` runs every kernel with the sub-blocks it was launched with;
``PYTEST_NPU_LAZY_SUBBLOCKS_CHECK=1`` runs every widened launch both ways and fails, naming the kernel, if
any bit of any tensor argument differs (test/npu_kernels/test_widening.py).
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import os
import textwrap
from dataclasses import dataclass, field

from .batching import MAX_BLOCK_ELEMENTS, _overlapping

#: run every kernel with the sub-blocks it was launched with (``1``)
AS_LAUNCHED_ENV = "PYTEST_NPU_LAZY_SUBBLOCKS_AS_LAUNCHED"
#: run every widened launch both ways and compare every bit of every tensor argument (``1``)
CHECK_ENV = "PYTEST_NPU_LAZY_SUBBLOCKS_CHECK"
_SUFFIX = "BLOCK_SUB"

#: triton.language's reductions and scans: their axis is the second argument (or ``axis=``)
_TL_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "reduce_or"}
_TL_SCANS = {"cumsum", "cumprod", "associative_scan"}
#: torch's and torch_npu's triton_helpers that reduce: (position of the axis argument, values returned)
_HELPER_REDUCTIONS = {"prod": (1, 1), "min2": (1, 1), "max2": (1, 1), "any": (1, 1), "max_with_index": (2, 2),
                      "min_with_index": (2, 2), "welford": (3, 3), "online_softmax_reduce": (2, 2),
                      "select_one": (2, 1)}
#: triton_helpers that compute element by element: values returned
_HELPER_ELEMENTWISE = {"promote_to_tensor": 1, "is_floating": 1, "div_floor_integer": 1, "remainder_integer": 1,
                       "pow_integer": 1, "minimum": 1, "maximum": 1, "minimum_with_index": 2,
                       "maximum_with_index": 2, "exp": 1, "online_softmax_combine": 2, "welford_reduce": 3,
                       "welford_combine": 3, "frexp": 2, "fp8e4m3fn_to_float32": 1, "device_assert_then": 1}
#: triton.language calls that could move an element to another position, or order two of them
_REFUSED = {"view", "permute", "trans", "sort", "gather", "join", "split", "dot", "flip", "interleave",
            "histogram", "ravel", "cat", "swizzle2d", "dot_scaled", "make_block_ptr", "advance",
            "make_tensor_descriptor", "load_tensor_descriptor", "store_tensor_descriptor", "inline_asm_elementwise",
            "expand_dims", "debug_barrier", "extract_slice", "insert_slice"}
#: modules whose other functions compute element by element
_ELEMENTWISE_MODULES = {"tl", "libdevice", "tl_math", "math", "extension"}
_GLOBAL_NAMES = _ELEMENTWISE_MODULES | {"triton_helpers", "triton"}
_SCALAR_BUILTINS = {"min", "max", "abs", "int", "float", "bool", "len"}


class _Refused(Exception):
    """The whole kernel runs as launched."""


class _Disqualified(Exception):
    """One axis keeps its sub-blocks; the others may still widen."""

    def __init__(self, axis: str, reason: str) -> None:
        super().__init__(reason)
        self.axis, self.reason = axis, reason


@dataclass(frozen=True)
class _Tile:
    """A block-shaped value: the axis each position holds (None: size 1); ``base_of``: an axis's own arange."""

    axes: tuple
    base_of: str | None = None


@dataclass(frozen=True)
class _Marked:
    """A scalar tied to an axis's sub-blocks: its ``BLOCK_SUB``, loop count, loop variable or offset."""

    kind: str  # "sub", "loops", "loop", "offset"
    axis: str
    extent: str = ""


_SCALAR = "scalar"
_MODULE = "module"


@dataclass
class Plan:
    """Which axes of a kernel may run wide: axis -> (its ``BLOCK_SUB`` parameter, its extent's parameter)."""

    axes: dict = field(default_factory=dict)
    order: list = field(default_factory=list)  # the axes as the blocks' positions hold them, outermost first
    constants: dict = field(default_factory=dict)  # BLOCK_SUB constants the kernel declares itself
    reason: str = ""  # why nothing, or some axes, may not


def _axis_of(name: str) -> str:
    return name[: -len(_SUFFIX)].lower()


class _Layouts:
    """One pass over a kernel's body that follows every value's layout (see the module docstring)."""

    def __init__(self, function: ast.FunctionDef, parameters: list[str], candidates: set[str]) -> None:
        self.function, self.candidates = function, candidates
        self.env: dict[str, object] = {}
        for name in parameters:
            self.env[name] = _Marked("sub", _axis_of(name)) if name.endswith(_SUFFIX) else _SCALAR
        self.looped: dict[str, int] = {}  # axis -> its loop (the node's id)
        self.constants: dict[str, int] = {}
        self.extents: dict[str, str] = {}
        self.loads: dict[str, set[str]] = {}
        self.stores: dict[str, set[str]] = {}

    # -- statements ------------------------------------------------------------------------------------------------
    def run(self) -> None:
        self.block(self.function.body)
        for pointer in set(self.loads) & set(self.stores):
            if len(self.loads[pointer] | self.stores[pointer]) != 1:
                raise _Refused(f"{pointer} is loaded and stored at different offsets")

    def block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            self.assign(node.targets[0], self.value(node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name = node.target.id
            if name.endswith(_SUFFIX) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                if name in self.env:
                    raise _Refused(f"{name} is assigned in the kernel")
                self.constants[name] = node.value.value
                self.env[name] = _Marked("sub", _axis_of(name))
            else:
                self.assign(node.target, self.value(node.value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self.assign(node.target, self.combine([self.name(node.target.id), self.value(node.value)],
                                                  node.op, node))
        elif isinstance(node, ast.Expr):
            self.value(node.value)
        elif isinstance(node, ast.For):
            self.loop(node)
        elif isinstance(node, ast.If):
            self.branch(node)
        elif isinstance(node, ast.Pass) or (isinstance(node, ast.Return) and node.value is None):
            pass
        else:
            raise _Refused(f"a {type(node).__name__} statement at line {node.lineno}, which this check cannot follow")

    def assign(self, target: ast.expr, value: object) -> None:
        if isinstance(target, ast.Name):
            if target.id.endswith(_SUFFIX):
                raise _Refused(f"{target.id} is assigned in the kernel")
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, tuple) and \
                len(value) == len(target.elts):
            for element, part in zip(target.elts, value):
                self.assign(element, part)
        else:
            raise _Refused(f"an assignment to {ast.unparse(target)} this check cannot follow")

    def loop(self, node: ast.For) -> None:
        iterator = node.iter
        if not (isinstance(node.target, ast.Name) and isinstance(iterator, ast.Call) and not node.orelse):
            raise _Refused(f"a loop at line {node.lineno} this check cannot follow")
        bounds = [self.value(argument, in_range=True) for argument in iterator.args]
        axis = None
        if len(bounds) == 1 and isinstance(bounds[0], _Marked) and bounds[0].kind == "loops":
            axis = bounds[0].axis
            if self.looped.setdefault(axis, id(node)) != id(node):
                raise _Disqualified(axis, f"{axis} has more than one loop over its sub-blocks")
            self.extents[axis] = bounds[0].extent
            _carried_or_read_after(self.function, node, axis)
        elif any(b != _SCALAR for b in bounds):
            raise _Refused(f"a loop at line {node.lineno} over {ast.unparse(iterator)}, which this check cannot follow")
        self.env[node.target.id] = _Marked("loop", axis) if axis else _SCALAR
        self.block(node.body)
        first = dict(self.env)
        self.block(node.body)  # a value carried from one iteration to the next must keep its layout
        changed = sorted(k for k, v in self.env.items() if first.get(k, v) != v)
        if changed:
            raise _Refused(f"{', '.join(changed)} change their layout from one iteration to the next")

    def branch(self, node: ast.If) -> None:
        test = self.value(node.test)
        if isinstance(test, _Marked) and test.kind != "sub":
            raise _Disqualified(test.axis, f"a branch reads {test.axis}'s loop")
        before = dict(self.env)
        self.block(node.body)
        taken = self.env
        self.env = dict(before)
        self.block(node.orelse)
        for name in set(taken) | set(self.env):
            if name in taken and name in self.env and taken[name] != self.env[name]:
                raise _Refused(f"{name} has another layout in each branch of the if at line {node.lineno}")
            self.env.setdefault(name, taken.get(name))

    # -- expressions -----------------------------------------------------------------------------------------------
    def name(self, name: str) -> object:
        if name in self.env:
            value = self.env[name]
            if isinstance(value, _Marked) and value.axis not in self.candidates and value.kind != "sub":
                return _SCALAR
            return value
        if name in _GLOBAL_NAMES or name in _SCALAR_BUILTINS or name == "range":
            return _MODULE
        raise _Refused(f"reads {name}, which this check cannot place")

    def value(self, node: ast.expr, in_range: bool = False) -> object:
        if isinstance(node, ast.Constant):
            return _SCALAR
        if isinstance(node, ast.Name):
            found = self.name(node.id)
            if isinstance(found, _Marked) and found.kind == "loops" and not in_range:
                raise _Disqualified(found.axis, f"{node.id}, {found.axis}'s loop count, is read outside its range()")
            return found
        if isinstance(node, ast.Attribute):
            return _SCALAR  # tl.float32, x.dtype: not block-shaped
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp):
            loops = _loop_count(node)
            if loops is not None:
                sub = self.name(loops[0])
                if isinstance(sub, _Marked) and sub.kind == "sub" and sub.axis in self.candidates and \
                        self.name(loops[1]) == _SCALAR:
                    return _Marked("loops", sub.axis, loops[1])
            return self.combine([self.value(node.left), self.value(node.right)], node.op, node)
        if isinstance(node, ast.BoolOp):
            return self.combine([self.value(v) for v in node.values], node.op, node)
        if isinstance(node, ast.Compare):
            return self.combine([self.value(node.left), *(self.value(c) for c in node.comparators)], None, node)
        if isinstance(node, ast.UnaryOp):
            return self.combine([self.value(node.operand)], node.op, node)
        if isinstance(node, ast.IfExp):
            return self.combine([self.value(node.test), self.value(node.body), self.value(node.orelse)], None, node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.value(element) for element in node.elts)
        raise _Refused(f"{ast.unparse(node)}, which this check cannot follow")

    def subscript(self, node: ast.Subscript) -> object:
        operand = self.value(node.value)
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if not isinstance(operand, _Tile):
            raise _Refused(f"{ast.unparse(node)}: an index this check cannot follow")
        positions = iter(operand.axes)
        axes = []
        for element in elements:
            if isinstance(element, ast.Constant) and element.value is None:
                axes.append(None)
            elif isinstance(element, ast.Slice) and element.lower is None and element.upper is None and \
                    element.step is None:
                axes.append(next(positions, "?"))
            else:
                raise _Refused(f"{ast.unparse(node)}: an index this check cannot follow")
        if "?" in axes or next(positions, None) is not None:
            raise _Refused(f"{ast.unparse(node)} does not keep every position of its operand")
        return _Tile(tuple(axes), operand.base_of)

    def combine(self, operands: list, op, node: ast.AST) -> object:
        marked = [o for o in operands if isinstance(o, _Marked) and o.axis in self.candidates]
        if marked:
            return self.marked(operands, marked, op, node)
        tiles = [o for o in operands if isinstance(o, _Tile)]
        if any(isinstance(o, tuple) for o in operands):
            raise _Refused(f"{ast.unparse(node)} computes with a tuple of blocks")
        for tile in tiles:
            if tile.base_of is not None:
                raise _Disqualified(tile.base_of, f"{tile.base_of}'s arange is used other than in its index")
        return _merge(tiles, node) if tiles else _SCALAR

    def marked(self, operands: list, marked: list, op, node: ast.AST) -> object:
        """Arithmetic with an axis's ``BLOCK_SUB``, loop variable or offset: only its index's own forms."""
        axis = marked[0].axis
        kinds = sorted(o.kind for o in marked)
        others = [o for o in operands if not (isinstance(o, _Marked) and o.axis in self.candidates)]
        if len(operands) == 2 and isinstance(op, ast.Mult) and kinds == ["loop", "sub"] and \
                marked[0].axis == marked[1].axis:
            return _Marked("offset", axis)
        if len(operands) == 2 and isinstance(op, ast.Add) and kinds == ["offset"]:
            other = others[0]
            if other == _SCALAR:
                return _Marked("offset", axis)
            if isinstance(other, _Tile) and other.base_of == axis:
                return _Tile(other.axes)  # the axis's index: offset + loop * SUB + arange(SUB)
        raise _Disqualified(axis, f"{ast.unparse(node)} computes with {axis}'s sub-blocks other than its index does")

    def call(self, node: ast.Call) -> object:
        func = node.func
        if isinstance(func, ast.Name):
            if self.name(func.id) is not _MODULE or func.id not in _SCALAR_BUILTINS:
                raise _Refused(f"calls {func.id}(), which this check cannot read")
            if any(self.value(a) != _SCALAR for a in node.args):
                raise _Refused(f"{func.id}() of a block, which this check cannot follow")
            return _SCALAR
        if not isinstance(func, ast.Attribute):
            raise _Refused(f"calls {ast.unparse(func)}, which this check cannot read")
        name = func.attr
        if name.startswith("atomic_") or name in _REFUSED:
            raise _Refused(f"{name}: it could move or order elements")
        if not (isinstance(func.value, ast.Name) and func.value.id in _GLOBAL_NAMES and func.value.id not in self.env):
            return self.method(self.value(func.value), name, node)
        owner = func.value.id
        if owner == "triton_helpers":
            return self.helper(name, node)
        if owner not in _ELEMENTWISE_MODULES:
            raise _Refused(f"calls {owner}.{name}, which this check cannot read")
        if name == "arange":
            return self.arange(node)
        if name in ("full", "zeros"):
            return self.shape(node.args[0] if node.args else None, node)
        if name in ("reshape", "broadcast_to"):
            return self.reshaped(self.value(node.args[0]), node.args[1:], node, name)
        if name in _TL_REDUCTIONS or name in _TL_SCANS:
            operand = self.value(node.args[0])
            outputs = len(operand) if isinstance(operand, tuple) else (
                2 if any(k.arg == "return_indices" for k in node.keywords) else 1)
            return self.reduced(operand, node, 1, outputs, scan=name in _TL_SCANS)
        if name in ("load", "store"):
            self.memory(name, node)
        if name == "program_id" or name == "num_programs":
            return _SCALAR
        return self.combine([self.value(a) for a in (*node.args, *(k.value for k in node.keywords))], None, node)

    def method(self, operand: object, name: str, node: ast.Call) -> object:
        if not isinstance(operand, _Tile) and operand != _SCALAR:
            raise _Refused(f"{ast.unparse(node)[:80]}: a method of a value this check cannot follow")
        if name == "to":
            return self.combine([operand], None, node)
        if name in ("reshape", "broadcast_to"):
            return self.reshaped(operand, node.args, node, name)
        if name in _TL_REDUCTIONS or name in _TL_SCANS:
            return self.reduced(operand, node, 0, 1, scan=name in _TL_SCANS)
        raise _Refused(f"the method {name}() of a block, which this check cannot follow")

    def helper(self, name: str, node: ast.Call) -> object:
        if name in _HELPER_REDUCTIONS:
            position, outputs = _HELPER_REDUCTIONS[name]
            operands = [self.value(a) for a in node.args[:position]]
            merged = self.combine(operands, None, node)
            return self.reduced(merged, node, position, outputs)
        if name in _HELPER_ELEMENTWISE:
            merged = self.combine([self.value(a) for a in (*node.args, *(k.value for k in node.keywords))], None,
                                  node)
            count = _HELPER_ELEMENTWISE[name]
            return merged if count == 1 else (merged,) * count
        raise _Refused(f"calls triton_helpers.{name}, which this check does not know")

    def arange(self, node: ast.Call) -> object:
        if len(node.args) != 2 or not (isinstance(node.args[0], ast.Constant) and node.args[0].value == 0):
            raise _Refused(f"{ast.unparse(node)}: an arange this check cannot follow")
        size = self.shape_entry(node.args[1])
        axis = size if size is not None else "?"
        return _Tile((axis,), axis if axis in self.candidates else None)

    def shape_entry(self, node: ast.expr) -> str | None:
        """The axis a size names: a ``BLOCK_SUB``'s axis, None for 1, else the size's own text (an axis of its own)."""
        if isinstance(node, ast.Constant) and node.value == 1:
            return None
        if isinstance(node, ast.Name) and node.id in self.env and isinstance(self.env[node.id], _Marked) and \
                self.env[node.id].kind == "sub":
            return self.env[node.id].axis
        if isinstance(node, ast.Name) and node.id in self.env and self.env[node.id] == _SCALAR:
            return f"<{node.id}>"
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return f"<{node.value}>"
        raise _Refused(f"a size {ast.unparse(node)} this check cannot follow")

    def shape(self, node: ast.expr | None, call: ast.Call) -> _Tile:
        if isinstance(node, ast.Attribute) and node.attr == "shape":  # another block's shape: its layout
            like = self.value(node.value)
            if isinstance(like, _Tile):
                return _Tile(like.axes)
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise _Refused(f"{ast.unparse(call)}: a shape this check cannot read")
        return _Tile(tuple(self.shape_entry(e) for e in node.elts))

    def reshaped(self, operand: object, arguments: list, node: ast.Call, name: str) -> _Tile:
        whole = len(arguments) == 1 and (isinstance(arguments[0], (ast.List, ast.Tuple)) or (
            isinstance(arguments[0], ast.Attribute) and arguments[0].attr == "shape"))
        shape = self.shape(arguments[0] if whole else ast.Tuple(list(arguments)), node)
        if not isinstance(operand, _Tile):
            return shape
        if operand.base_of is not None:
            raise _Disqualified(operand.base_of, f"{operand.base_of}'s arange is reshaped")
        if name == "broadcast_to":
            if len(operand.axes) != len(shape.axes) or any(a is not None and a != b
                                                            for a, b in zip(operand.axes, shape.axes)):
                raise _Refused(f"{ast.unparse(node)} broadcasts into other positions")
        elif [a for a in operand.axes if a is not None] != [a for a in shape.axes if a is not None]:
            raise _Refused(f"{ast.unparse(node)} moves elements between axes")
        return shape

    def reduced(self, operand: object, node: ast.Call, position: int, outputs: int, scan: bool = False) -> object:
        if isinstance(operand, tuple):
            operand = self.combine(list(operand), None, node)
        if not isinstance(operand, _Tile):
            return _SCALAR if outputs == 1 else (_SCALAR,) * outputs
        axis = _constant_axis(node, position)
        if axis is _NOT_CONSTANT:
            raise _Refused(f"{ast.unparse(node)} reduces along an axis that is not a constant")
        along = list(operand.axes) if axis is None else [operand.axes[axis]]
        for held in along:
            if held in self.candidates:
                raise _Disqualified(held, f"{ast.unparse(node)[:80]} reduces along {held}")
        keep = any(k.arg in ("keep_dims", "keepdims") and not (isinstance(k.value, ast.Constant) and
                                                                not k.value.value) for k in node.keywords)
        if scan:
            result = operand
        elif axis is None:
            result = _SCALAR
        else:
            axes = list(operand.axes)
            if keep:
                axes[axis] = None
            else:
                del axes[axis]
            result = _Tile(tuple(axes))
        return result if outputs == 1 else (result,) * outputs

    def memory(self, name: str, node: ast.Call) -> None:
        address = node.args[0] if node.args else None
        base = address
        while isinstance(base, ast.BinOp):
            base = base.left
        if not (isinstance(base, ast.Name) and self.env.get(base.id) == _SCALAR):
            raise _Refused(f"a {name} from an address that does not start at a pointer argument")
        (self.loads if name == "load" else self.stores).setdefault(base.id, set()).add(ast.dump(address))
        if name == "store":
            where = self.value(address)
            held = set(where.axes) if isinstance(where, _Tile) else set()
            for axis in sorted(self.candidates - held):
                raise _Disqualified(axis, f"a store's address does not depend on {axis}")


def _merge(tiles: list[_Tile], node: ast.AST) -> _Tile:
    rank = len(tiles[0].axes)
    if any(len(t.axes) != rank for t in tiles):
        raise _Refused(f"{ast.unparse(node)[:80]} combines blocks of different ranks")
    axes = []
    for position in range(rank):
        held = {t.axes[position] for t in tiles} - {None}
        if len(held) > 1:
            raise _Refused(f"{ast.unparse(node)[:80]} puts {' and '.join(sorted(held))} in one position")
        axes.append(held.pop() if held else None)
    return _Tile(tuple(axes))


_NOT_CONSTANT = object()


def _constant_axis(node: ast.Call, position: int):
    value = node.args[position] if len(node.args) > position else next(
        (k.value for k in node.keywords if k.arg in ("axis", "dim")), None)
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return None
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) and isinstance(value.operand, ast.Constant):
        value = ast.Constant(-value.operand.value)
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value
    return _NOT_CONSTANT


def _loop_count(node: ast.BinOp) -> tuple[str, str] | None:
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


def _carried_or_read_after(function: ast.FunctionDef, loop: ast.For, axis: str) -> None:
    """No value assigned in the loop is read before it is assigned in an iteration, or read outside the loop."""
    written = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    carried = _read_before_written(loop.body, {loop.target.id} if isinstance(loop.target, ast.Name) else set(),
                                   written)
    if carried:
        raise _Disqualified(axis, f"{sorted(carried)[0]} is carried from one of {axis}'s sub-blocks to the next")
    inside = {id(n) for n in ast.walk(loop)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in inside and \
                node.id in written:
            raise _Disqualified(axis, f"{node.id}, assigned in {axis}'s loop, is read outside it")


def _read_before_written(statements: list[ast.stmt], defined: set[str], written: set[str]) -> set[str]:
    carried: set[str] = set()
    for statement in statements:
        if isinstance(statement, ast.For):
            carried |= _reads_of(statement.iter, defined, written)
            carried |= _read_before_written(statement.body, defined | {statement.target.id}
                                            if isinstance(statement.target, ast.Name) else set(defined), written)
        elif isinstance(statement, ast.If):
            carried |= _reads_of(statement.test, defined, written)
            after_body, after_else = set(defined), set(defined)
            carried |= _read_before_written(statement.body, after_body, written)
            carried |= _read_before_written(statement.orelse, after_else, written)
            defined |= after_body & after_else
        else:
            value = getattr(statement, "value", None)
            targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
            if isinstance(statement, ast.AugAssign):
                carried |= _reads_of(statement.target, defined, written, load_only=False)
            if value is not None:
                carried |= _reads_of(value, defined, written)
            for target in targets:
                if target is not None:
                    defined |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return carried


def _reads_of(node: ast.AST, defined: set[str], written: set[str], load_only: bool = True) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and (isinstance(n.ctx, ast.Load) or not load_only)
            and n.id in written and n.id not in defined}


def plan_source(source: str, parameters: list[str]) -> Plan:
    """Which of a kernel's sub-block axes may run wide, from the source of its ``def``."""
    function = ast.parse(textwrap.dedent(source)).body[0]
    candidates = {_axis_of(p) for p in parameters if p.endswith(_SUFFIX)}
    reasons: list[str] = []
    while candidates:
        layouts = _Layouts(function, parameters, candidates)
        try:
            layouts.run()
        except _Disqualified as kept:
            candidates.discard(kept.axis)
            reasons.append(f"{kept.axis}: {kept.reason}")
            continue
        except _Refused as refused:
            return Plan(reason=str(refused))
        unlooped = sorted(candidates - set(layouts.looped))
        if unlooped:
            candidates -= set(unlooped)
            reasons.extend(f"{axis}: no loop over its sub-blocks" for axis in unlooped)
            continue
        order = _positions(function, layouts, candidates)
        axes = {axis: (f"{axis.upper()}{_SUFFIX}", layouts.extents[axis]) for axis in candidates}
        return Plan(axes, order, layouts.constants, "; ".join(reasons))
    return Plan(reason="; ".join(reasons) or "no BLOCK_SUB parameter")


def _positions(function: ast.FunctionDef, layouts: _Layouts, axes: set[str]) -> list[str]:
    """The axes in the order of their positions in the blocks (read from each axis's ``base[None, :, ...]``)."""
    found: dict[str, int] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                isinstance(node.slice, ast.Tuple) and node.value.id.startswith("base_"):
            axis = node.value.id[len("base_"):]
            for position, element in enumerate(node.slice.elts):
                if isinstance(element, ast.Slice):
                    found.setdefault(axis, position)
    return sorted(axes, key=lambda a: found.get(a, -1))


@functools.lru_cache(maxsize=512)
def _plan_for(code: object, parameters: tuple[str, ...]) -> Plan:
    try:
        source = inspect.getsource(code)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return Plan(reason="its source cannot be read")
    try:
        return plan_source(source, list(parameters))
    except SyntaxError:
        return Plan(reason="its source does not parse on its own")


def plan(fn, parameters: list[str]) -> Plan:
    return _plan_for(getattr(fn, "__code__", fn), tuple(parameters))


def widths(executor, args: tuple, kwargs: dict) -> tuple[dict, str]:
    """The ``BLOCK_SUB`` keywords to launch with instead (empty: as launched), and the ledger's words for it."""
    names = list(executor.arg_names)
    if not any(name.endswith(_SUFFIX) for name in names):
        return {}, ""
    if os.environ.get(AS_LAUNCHED_ENV) == "1":
        return {}, f"sub-blocks as launched ({AS_LAUNCHED_ENV}=1)"
    decided = plan(executor.fn, names)
    if not decided.axes:
        return {}, f"sub-blocks as launched: {decided.reason}"
    bound = {**dict(zip(names, args)), **kwargs}
    tensors = [value for value in bound.values() if hasattr(value, "untyped_storage")]
    if _overlapping(tensors):
        return {}, "sub-blocks as launched: two tensor arguments share memory"
    sizes = {name: bound.get(name) for name in names if name.endswith(_SUFFIX)}
    sizes.update(decided.constants)
    if not all(isinstance(v, int) and v >= 1 for v in sizes.values()):
        return {}, "sub-blocks as launched: a BLOCK_SUB not passed as an integer"
    block = math.prod(sizes.values())
    wider: dict[str, int] = {}
    said = []
    before = after = 1
    for axis in reversed(decided.order):  # innermost first: the widest contiguous loads
        name, extent_name = decided.axes[axis]
        extent, launched = bound.get(extent_name), sizes[name]
        if not isinstance(extent, int) or launched & (launched - 1):
            continue
        width, covered = launched, _covered(extent, launched)
        while width < extent and block * 2 <= MAX_BLOCK_ELEMENTS and _covered(extent, width * 2) == covered:
            width, block = width * 2, block * 2
        before *= -(-extent // launched)
        after *= -(-extent // width)
        if width != launched:
            wider[name] = width
            said.append(f"{axis} {launched} -> {width}")
    if not wider:
        spanned = before == 1
        return {}, ("sub-blocks as launched: each spans its axis already" if spanned else
                    "sub-blocks as launched: no wider sub-block touches the same indices within the size limit")
    return wider, f"sub-blocks widened: {', '.join(said)}: {before} iterations as {after}"


def _covered(extent: int, width: int) -> int:
    """How many indices the loop touches, masked or not: ``ceil(extent / width) * width``. A wider sub-block is
    taken only where it touches the same ones, so no index outside the extent is computed, loaded or stored that
    the launch as given did not (an index of the next program's block included), whatever the kernel masks."""
    return -(-extent // width) * width


class WideningChanged(AssertionError):
    """Under ``PYTEST_NPU_LAZY_SUBBLOCKS_CHECK=1``: a widened launch wrote other bits than the launch as given."""


def run_both_ways(run, kernel: str, args: tuple, kwargs: dict, wider: dict, alias) -> object:
    """Run the launch as given and widened, from the same memory, and fail naming the kernel and the argument where
    any bit of a tensor argument differs; ``alias`` gives a CPU view of a tensor's bytes (no computation recorded)."""
    import torch

    tensors = {name: alias(value) for name, value in (*enumerate(args), *kwargs.items())
               if hasattr(value, "untyped_storage")}
    before = {name: view.clone() for name, view in tensors.items()}
    run(kwargs)
    narrow = {name: view.clone() for name, view in tensors.items()}
    for name, view in tensors.items():
        view.copy_(before[name])
    result = run({**kwargs, **wider})
    for name, view in tensors.items():
        if not torch.equal(_bits(view), _bits(narrow[name])):
            differ = int((_bits(view) != _bits(narrow[name])).sum())
            raise WideningChanged(f"Triton kernel {kernel}: widened sub-blocks ({wider}) wrote other bits than the "
                                  f"launch as given in argument {name} ({differ} elements differ)")
    return result


def _bits(tensor):
    import torch

    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(view)

"""Which of an index-codegen kernel's sub-block axes may run wide: read from its source, following every layout.

:mod:`.widening` launches a kernel with wider ``<A>BLOCK_SUB`` values; this module decides, from the source of
the kernel's ``def``, for which axes that provably writes the same bits (its docstring lists the conditions).
It follows the *layout* of every block-shaped value (which axis each position holds; None: size 1) through
the kernel, statement by statement, and keeps what each scalar is: a plain one (fixed in a program), one that
changes from one loop iteration to the next, or an axis's ``BLOCK_SUB``, loop count, loop variable or offset.

An axis whose elements could meet (a reduction or scan along it, a store whose address does not hold it, a
value carried from one of its sub-blocks to the next ...) is *disqualified*: it keeps its sub-blocks and the
reading starts again without it. Anything this reading cannot follow, or that could move or order elements
whatever the axis (a permute, an atomic, an unknown call, a truth test of a block, a load and a store of one
pointer at different addresses ...), *refuses* the whole kernel. Every store's address must be a pointer
argument plus axis indices, each times integer constants and parameters (a dynamic shape's strides), and fixed
scalars: the launch checks, with the launch's sizes, that no two elements of a program's block ever share an
address (:func:`.widening.widths`).
"""

from __future__ import annotations

import ast
import functools
import textwrap
from dataclasses import dataclass, field

from .addresses import POINTER, Accesses
from .kernel_text import (LOOPED, MODULE, NOT_CONSTANT, SCALAR, SUFFIX, Disqualified, Marked, Refused, Tile, argument,
                          axis_of, carried_or_read_after, constant_axis, loop_count, positions)


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
#: functions of triton.language and its math that compute element by element (anything else refuses), with
#: libdevice's (:func:`_elementwise`)
_TL_ELEMENTWISE = {
    "where", "maximum", "minimum", "abs", "exp", "exp2", "log", "log2", "cos", "sin", "sqrt", "sqrt_rn", "rsqrt",
    "sigmoid", "fma", "floor", "ceil", "erf", "div_rn", "fdiv", "cdiv", "clamp", "umulhi", "cast", "multiple_of",
    "max_contiguous", "max_constancy", "static_assert", "device_assert", "static_print", "rand", "randn",
    "randint", "fmod", "copysign", "nextafter", "hypot", "atan2", "cbrt", "lgamma", "erfinv", "fabs", "fmax",
    "fmin", "logb", "softplus", "sign", "neg", "isinf", "isnan"}
_ELEMENTWISE_MODULES = {"tl", "libdevice", "tl_math", "math", "extension"}
_MODULES = _ELEMENTWISE_MODULES | {"triton_helpers"}
_SCALAR_BUILTINS = {"min", "max", "abs", "int", "float", "bool"}
_LOOPS = {"range", "tl.range", "tl.static_range"}


@functools.cache
def _elementwise() -> frozenset[str]:
    """Element-wise function names, libdevice's among them: read when a kernel is first planned, since libdevice
    imports NumPy and the plugin loads this package (its zygotes stay bare)."""
    from .libdevice import FUNCTIONS

    return frozenset(_TL_ELEMENTWISE | set(FUNCTIONS))


@dataclass
class Plan:
    """What may run wide: axis -> its ``BLOCK_SUB`` parameter; and what the launch needs to size and check it."""

    axes: dict = field(default_factory=dict)
    order: list = field(default_factory=list)  # the widened axes as the blocks' positions hold them, outer first
    subs: dict = field(default_factory=dict)  # every axis with an arange: the BLOCK_SUB (or constant) sizing it
    extents: dict = field(default_factory=dict)  # every axis with a loop over its sub-blocks: its extent's name
    constants: dict = field(default_factory=dict)  # BLOCK_SUB constants the kernel declares itself
    #: each store: its address ((axis, its coefficient's factors), ...) and the axes its mask bounds to their extents
    stores: list = field(default_factory=list)
    #: the axes every load and store of the kernel is masked to their extents by: past its extent such an axis's
    #: elements touch no memory, so its sub-blocks may grow past the indices launched
    masked: list = field(default_factory=list)
    reason: str = ""  # why nothing, or some axes, may not


class Layouts(Accesses):
    """One pass over a kernel's body that follows every value's layout (the module docstring says what for)."""

    def __init__(self, function: ast.FunctionDef, parameters: list[str], candidates: set[str]) -> None:
        self.function, self.parameters, self.candidates = function, set(parameters), candidates
        self.env: dict[str, object] = {}
        for name in parameters:
            self.env[name] = Marked("sub", axis_of(name)) if name.endswith(SUFFIX) else SCALAR
        self.looped: dict[str, int] = {}  # axis -> its loop (the node's id)
        self.subs: dict[str, str] = {}
        self.extents: dict[str, str] = {}
        self.constants: dict[str, int] = {}
        self.addresses = {}
        self.loaded = {}
        self.stores = set()
        self.assigned = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.in_address = False
        self.offsets, self.bounding, self.definitions, self.masked = {}, {}, {}, None  # Accesses says what each holds
        self.counts = {}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.counts[node.id] = self.counts.get(node.id, 0) + 1

    def run(self) -> None:
        body = self.function.body
        self.block(body[:-1] if body and isinstance(body[-1], ast.Return) and body[-1].value is None else body)
        for pointer, loads in self.loaded.items():
            stored = self.addresses.get(pointer, set())
            if stored and (None in loads or loads != stored):
                raise Refused(f"{pointer} is loaded and stored at different addresses")
        for pointer, stored in self.addresses.items():
            if len(stored) != 1:
                raise Refused(f"{pointer} is stored at different addresses")

    # -- statements ------------------------------------------------------------------------------------------------
    def block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value = self.value(node.value)
            self.assign(node.targets[0], value)
            if isinstance(node.targets[0], ast.Name):
                self.note_index_or_mask(node.targets[0].id, node.value, value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name = node.target.id
            if name.endswith(SUFFIX) and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
                if name in self.env or name in self.constants:
                    raise Refused(f"{name} is assigned more than once")
                self.constants[name] = node.value.value
                self.env[name] = Marked("sub", axis_of(name))
            else:
                self.assign(node.target, self.value(node.value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            self.assign(node.target, self.combine([self.name(node.target.id), self.value(node.value)], node.op, node))
        elif isinstance(node, ast.Expr):
            self.value(node.value)
        elif isinstance(node, ast.For):
            self.loop(node)
        elif isinstance(node, ast.If):
            self.branch(node)
        elif not isinstance(node, ast.Pass):
            raise Refused(f"a {type(node).__name__} statement at line {node.lineno}, which this check cannot follow")

    def assign(self, target: ast.expr, value: object) -> None:
        if isinstance(target, ast.Name):
            if target.id.endswith(SUFFIX) or target.id in self.parameters or target.id in _MODULES:
                raise Refused(f"{target.id} is assigned in the kernel")
            self.env[target.id] = value
            self.forget(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, tuple) and len(value) == len(target.elts):
            for element, part in zip(target.elts, value):
                self.assign(element, part)
        else:
            raise Refused(f"an assignment to {ast.unparse(target)} this check cannot follow")

    def loop(self, node: ast.For) -> None:
        iterator = node.iter
        if not (isinstance(node.target, ast.Name) and isinstance(iterator, ast.Call) and not node.orelse
                and ast.unparse(iterator.func) in _LOOPS and not iterator.keywords):
            raise Refused(f"a loop at line {node.lineno} this check cannot follow")
        bounds = [self.value(argument, in_range=True) for argument in iterator.args]
        axis = None
        count = bounds[0] if len(bounds) == 1 else None
        if isinstance(count, Marked) and count.kind == "loops":
            axis = count.axis
            if self.looped.setdefault(axis, id(node)) != id(node) and axis in self.candidates:
                raise Disqualified(axis, f"{axis} has more than one loop over its sub-blocks")
            if axis in self.candidates:
                carried_or_read_after(self.function, node, axis)
            if self.extents.setdefault(axis, count.extent) != count.extent:  # the extent its range() runs over
                raise Refused(f"two loops over {axis}'s sub-blocks with different extents")
        elif any(b not in (SCALAR, LOOPED) for b in bounds):
            raise Refused(f"a loop at line {node.lineno} over {ast.unparse(iterator)}, which this check cannot follow")
        variable = Marked("loop", axis) if axis else LOOPED
        self.env[node.target.id] = variable
        self.forget(node.target.id)
        self.block(node.body)
        first = dict(self.env)
        self.env[node.target.id] = variable
        self.block(node.body)  # a value carried from one iteration to the next must keep its layout
        changed = sorted(k for k, v in self.env.items() if first.get(k, v) != v)
        if changed:
            raise Refused(f"{', '.join(changed)} change their layout from one iteration to the next")

    def branch(self, node: ast.If) -> None:
        test = self.value(node.test)
        if isinstance(test, Tile):
            raise Refused(f"the if at line {node.lineno} tests a block")
        if isinstance(test, Marked) and test.kind != "sub" and test.axis in self.candidates:
            raise Disqualified(test.axis, f"a branch reads {test.axis}'s loop")
        before, facts = dict(self.env), self.facts()
        self.block(node.body)
        taken, taken_facts, self.env = self.env, self.facts(), dict(before)
        self.restore(facts)
        self.block(node.orelse)
        self.restore(tuple({k: v for k, v in mine.items() if theirs.get(k) == v}
                           for mine, theirs in zip(self.facts(), taken_facts)))
        for name in set(taken) | set(self.env):
            if name in taken and name in self.env and taken[name] != self.env[name]:
                raise Refused(f"{name} has another layout in each branch of the if at line {node.lineno}")
            self.env.setdefault(name, taken.get(name))

    # -- expressions -----------------------------------------------------------------------------------------------
    def name(self, name: str) -> object:
        if POINTER.fullmatch(name) and name in self.parameters and not self.in_address:
            raise Refused(f"the pointer {name} is used other than as the start of a load's or store's address")
        if name in self.env:
            return self.env[name]
        if name in _MODULES or name in _SCALAR_BUILTINS:
            return MODULE
        raise Refused(f"reads {name}, which this check cannot place")

    def value(self, node: ast.expr, in_range: bool = False) -> object:
        if isinstance(node, ast.Constant):
            return SCALAR
        if isinstance(node, ast.Name):
            found = self.name(node.id)
            if isinstance(found, Marked) and found.kind == "loops" and not in_range:
                if found.axis in self.candidates:
                    raise Disqualified(found.axis, f"{node.id}, {found.axis}'s loop count, is read outside its range()")
                return SCALAR
            return found
        if isinstance(node, ast.Attribute):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in _MODULES and owner.id not in self.env:
                return SCALAR  # tl.float32, tl.int1 ...
            if node.attr == "dtype" and isinstance(self.value(owner), (Tile, str)):
                return SCALAR
            raise Refused(f"{ast.unparse(node)}: an attribute this check cannot follow")
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp):
            loops = loop_count(node)
            if loops is not None:
                sub = self.name(loops[0])
                if isinstance(sub, Marked) and sub.kind == "sub" and self.name(loops[1]) == SCALAR:
                    return Marked("loops", sub.axis, loops[1])  # its extent counts where a range() runs over it
            return self.combine([self.value(node.left), self.value(node.right)], node.op, node)
        if isinstance(node, (ast.BoolOp, ast.IfExp)) or (isinstance(node, ast.Compare) and len(node.ops) > 1) or (
                isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            parts = [self.value(child) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)]
            if any(isinstance(p, (Tile, tuple)) for p in parts):
                raise Refused(f"{ast.unparse(node)[:80]} takes the truth of a block")
            return self.combine(parts, None, node)
        if isinstance(node, ast.Compare):
            return self.combine([self.value(node.left), self.value(node.comparators[0])], None, node)
        if isinstance(node, ast.UnaryOp):
            return self.combine([self.value(node.operand)], node.op, node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.value(element) for element in node.elts)
        raise Refused(f"{ast.unparse(node)[:80]}, which this check cannot follow")

    def subscript(self, node: ast.Subscript) -> object:
        operand = self.value(node.value)
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if not isinstance(operand, Tile):
            raise Refused(f"{ast.unparse(node)}: an index this check cannot follow")
        positions = iter(operand.axes)
        axes: list[str | None] = []
        for element in elements:
            if isinstance(element, ast.Constant) and element.value is None:
                axes.append(None)
            elif isinstance(element, ast.Slice) and element.lower is None and element.upper is None and \
                    element.step is None:
                axes.append(next(positions, "?"))
            else:
                raise Refused(f"{ast.unparse(node)}: an index this check cannot follow")
        if "?" in axes or next(positions, None) is not None:
            raise Refused(f"{ast.unparse(node)} does not keep every position of its operand")
        return Tile(tuple(axes), operand.arange_of, operand.index_of, operand.looped)

    def combine(self, operands: list, op, node: ast.AST) -> object:
        if any(isinstance(o, tuple) for o in operands) or MODULE in operands:
            raise Refused(f"{ast.unparse(node)[:80]} computes with a tuple of blocks or a module")
        marked = [o for o in operands if isinstance(o, Marked)]
        if marked:
            return self.marked(operands, marked, op, node)
        tiles = [o for o in operands if isinstance(o, Tile)]
        looped = LOOPED in operands
        if len(tiles) == 1 and tiles[0].arange_of and isinstance(op, ast.Add) and SCALAR in operands and \
                len(operands) == 2 and tiles[0].arange_of not in self.candidates:
            return Tile(tiles[0].axes, index_of=tiles[0].arange_of)  # an axis's arange plus a fixed scalar
        for tile in tiles:
            if tile.arange_of in self.candidates:
                raise Disqualified(tile.arange_of, f"{tile.arange_of}'s arange is used other than in its index")
        if tiles:
            return merge(tiles, node)
        return LOOPED if looped else SCALAR

    def marked(self, operands: list, marked: list[Marked], op, node: ast.AST) -> object:
        """Arithmetic with an axis's ``BLOCK_SUB``, loop variable or offset: only its index's own forms."""
        axis = marked[0].axis
        kinds = sorted(o.kind for o in marked)
        others = [o for o in operands if not isinstance(o, Marked)]
        if len(operands) == 2 and isinstance(op, ast.Mult) and kinds == ["loop", "sub"] and marked[1].axis == axis:
            return Marked("offset", axis)
        if len(operands) == 2 and isinstance(op, ast.Add) and kinds == ["offset"]:
            other = others[0]
            if other == SCALAR:
                return Marked("offset", axis)
            if isinstance(other, Tile) and other.arange_of == axis:
                return Tile(other.axes, index_of=axis, looped=True)  # offset + loop * SUB + arange(SUB)
        involved = sorted({o.axis for o in marked if o.axis in self.candidates})
        if involved:  # each in turn: the reading starts again without the first
            raise Disqualified(involved[0], f"{ast.unparse(node)[:80]} computes with {involved[0]}'s sub-blocks "
                                            "other than its index does")
        plain = [LOOPED if isinstance(o, Marked) and o.kind in ("loop", "offset") else
                 SCALAR if isinstance(o, Marked) else o for o in operands]
        return self.combine(plain, op, node)

    def call(self, node: ast.Call) -> object:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id not in _SCALAR_BUILTINS or func.id in self.env:
                raise Refused(f"calls {func.id}(), which this check cannot read")
            values = [self.value(a) for a in node.args]
            if node.keywords or any(isinstance(v, (Tile, tuple, Marked)) for v in values):
                raise Refused(f"{ast.unparse(node)[:80]}: a builtin of a block or of a sub-block's size")
            return LOOPED if LOOPED in values else SCALAR
        if not isinstance(func, ast.Attribute):
            raise Refused(f"calls {ast.unparse(func)[:80]}, which this check cannot read")
        name = func.attr
        if not (isinstance(func.value, ast.Name) and func.value.id in _MODULES and func.value.id not in self.env):
            return self.method(self.value(func.value), name, node)
        owner = func.value.id
        if owner == "triton_helpers":
            return self.helper(name, node)
        if name == "arange":
            return self.arange(node)
        if name in ("full", "zeros"):
            return self.shape(argument(node, 0, "shape"), node)
        if name in ("reshape", "broadcast_to"):
            return self.reshaped(self.value(argument(node, 0, "input")), node.args[1:], node, name)
        if name in _TL_REDUCTIONS or name in _TL_SCANS:
            if owner != "tl" or len(node.args) > 2:
                raise Refused(f"{ast.unparse(node)[:80]}: a reduction with options this check does not read")
            operand = self.value(argument(node, 0, "input"))
            outputs = len(operand) if isinstance(operand, tuple) else (
                2 if any(k.arg == "return_indices" for k in node.keywords) else 1)
            return self.reduced(operand, node, 1, outputs, scan=name in _TL_SCANS)
        if name in ("load", "store"):
            return self.memory(name, node)
        if name in ("program_id", "num_programs"):
            return SCALAR
        if name not in _elementwise():
            raise Refused(f"calls {owner}.{name}, which this check does not know to compute element by element")
        return self.combine([self.value(a) for a in (*node.args, *(k.value for k in node.keywords))], None, node)

    def method(self, operand: object, name: str, node: ast.Call) -> object:
        if not isinstance(operand, Tile) and operand not in (SCALAR, LOOPED):
            raise Refused(f"{ast.unparse(node)[:80]}: a method of a value this check cannot follow")
        if name == "to" and not isinstance(operand, Tile):
            return operand
        if not isinstance(operand, Tile):
            raise Refused(f"{ast.unparse(node)[:80]}: a method this check cannot follow")
        if name == "to":
            return self.combine([operand], None, node)
        if name in ("reshape", "broadcast_to"):
            return self.reshaped(operand, node.args, node, name)
        if name in ("sum", "max", "min", "cumsum") and len(node.args) <= 1:
            return self.reduced(operand, node, 0, 1, scan=name == "cumsum")
        raise Refused(f"the method {name}() of a block, which this check cannot follow")

    def helper(self, name: str, node: ast.Call) -> object:
        if name in _HELPER_REDUCTIONS:
            position, outputs = _HELPER_REDUCTIONS[name]
            if len(node.args) < position + 1 or node.keywords:
                raise Refused(f"{ast.unparse(node)[:80]}: its operands and axis not in place")
            merged = self.combine([self.value(a) for a in node.args[:position]], None, node)
            return self.reduced(merged, node, position, outputs)
        if name in _HELPER_ELEMENTWISE:
            merged = self.combine([self.value(a) for a in (*node.args, *(k.value for k in node.keywords))], None,
                                  node)
            count = _HELPER_ELEMENTWISE[name]
            return merged if count == 1 else (merged,) * count
        raise Refused(f"calls triton_helpers.{name}, which this check does not know")

    def arange(self, node: ast.Call) -> object:
        if len(node.args) != 2 or node.keywords or not (isinstance(node.args[0], ast.Constant) and
                                                         node.args[0].value == 0):
            raise Refused(f"{ast.unparse(node)}: an arange this check cannot follow")
        size = node.args[1]
        sub = self.env.get(size.id) if isinstance(size, ast.Name) else None
        if isinstance(size, ast.Name) and isinstance(sub, Marked) and sub.kind == "sub":
            axis = sub.axis
            if self.subs.setdefault(axis, size.id) != size.id:
                raise Refused(f"two BLOCK_SUB size the arange of {axis}")
            return Tile((axis,), arange_of=axis)
        return Tile((self.shape_entry(size),))

    def shape_entry(self, node: ast.expr) -> str | None:
        """The axis a size names: a ``BLOCK_SUB``'s axis, None for 1, else the size's own text (an axis of its own)."""
        if isinstance(node, ast.Constant) and node.value == 1:
            return None
        named = self.env.get(node.id) if isinstance(node, ast.Name) else None
        if isinstance(named, Marked) and named.kind == "sub":
            return named.axis
        if isinstance(node, ast.Name) and self.env.get(node.id) == SCALAR:
            return f"<{node.id}>"
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return f"<{node.value}>"
        raise Refused(f"a size {ast.unparse(node)} this check cannot follow")

    def shape(self, node: ast.expr | None, call: ast.Call) -> Tile:
        if isinstance(node, ast.Attribute) and node.attr == "shape":  # another block's shape: its layout
            like = self.value(node.value)
            if isinstance(like, Tile):
                return Tile(like.axes)
        if not isinstance(node, (ast.List, ast.Tuple)):
            raise Refused(f"{ast.unparse(call)[:80]}: a shape this check cannot read")
        axes = tuple(self.shape_entry(e) for e in node.elts)
        named = [a for a in axes if a is not None]
        if len(named) != len(set(named)):
            raise Refused(f"{ast.unparse(call)[:80]} holds one axis in two positions")
        return Tile(axes)

    def reshaped(self, operand: object, arguments: list, node: ast.Call, name: str) -> Tile:
        whole = len(arguments) == 1 and (isinstance(arguments[0], (ast.List, ast.Tuple)) or (
            isinstance(arguments[0], ast.Attribute) and arguments[0].attr == "shape"))
        if not arguments or node.keywords:
            raise Refused(f"{ast.unparse(node)[:80]}: a shape this check cannot read")
        shape = self.shape(arguments[0] if whole else ast.Tuple(list(arguments)), node)
        if not isinstance(operand, Tile):
            return shape
        if operand.arange_of in self.candidates:
            raise Disqualified(operand.arange_of, f"{operand.arange_of}'s arange is reshaped")
        if name == "broadcast_to":
            if len(operand.axes) != len(shape.axes) or any(a is not None and a != b
                                                            for a, b in zip(operand.axes, shape.axes)):
                raise Refused(f"{ast.unparse(node)[:80]} broadcasts into other positions")
        elif [a for a in operand.axes if a is not None] != [a for a in shape.axes if a is not None]:
            raise Refused(f"{ast.unparse(node)[:80]} moves elements between axes")
        return shape

    def reduced(self, operand: object, node: ast.Call, position: int, outputs: int, scan: bool = False) -> object:
        if isinstance(operand, tuple):
            if not operand:
                raise Refused(f"{ast.unparse(node)[:80]} reduces nothing")
            operand = self.combine(list(operand), None, node) if len(operand) > 1 else operand[0]
        if not isinstance(operand, Tile):
            raise Refused(f"{ast.unparse(node)[:80]}: a reduction of a value this check cannot follow")
        axis = constant_axis(node, position)
        rank = len(operand.axes)
        if axis is NOT_CONSTANT or (axis is not None and not -rank <= axis < rank):
            raise Refused(f"{ast.unparse(node)[:80]} reduces along an axis that is not a constant of the block")
        axis = axis % rank if axis is not None else None
        for held in list(operand.axes) if axis is None else [operand.axes[axis]]:
            if held in self.candidates:
                raise Disqualified(held, f"{ast.unparse(node)[:80]} reduces along {held}")
        keep = any(k.arg in ("keep_dims", "keepdims") and not (isinstance(k.value, ast.Constant) and
                                                                not k.value.value) for k in node.keywords)
        if scan:
            result: object = Tile(operand.axes)
        elif axis is None:
            result = SCALAR
        else:
            axes = list(operand.axes)
            if keep:
                axes[axis] = None
            else:
                del axes[axis]
            result = Tile(tuple(axes))
        return result if outputs == 1 else (result,) * outputs

def merge(tiles: list[Tile], node: ast.AST) -> Tile:
    rank = len(tiles[0].axes)
    if any(len(t.axes) != rank for t in tiles):
        raise Refused(f"{ast.unparse(node)[:80]} combines blocks of different ranks")
    axes = []
    for position in range(rank):
        held = {t.axes[position] for t in tiles} - {None}
        if len(held) > 1:
            raise Refused(f"{ast.unparse(node)[:80]} puts {' and '.join(sorted(held))} in one position")
        axes.append(held.pop() if held else None)
    named = [a for a in axes if a is not None]
    if len(named) != len(set(named)):
        raise Refused(f"{ast.unparse(node)[:80]} holds one axis in two positions")
    return Tile(tuple(axes))


def plan_source(source: str, parameters: list[str]) -> Plan:
    """Which of a kernel's sub-block axes may run wide, from the source of its ``def``."""
    tree = ast.parse(textwrap.dedent(source)).body
    if not tree or not isinstance(tree[0], ast.FunctionDef):
        return Plan(reason="its source is not a def")
    function = tree[0]
    subs = [p for p in parameters if p.endswith(SUFFIX)]
    if len({axis_of(p) for p in subs}) != len(subs):
        return Plan(reason="two BLOCK_SUB parameters name one axis")
    candidates = {axis_of(p) for p in subs}
    reasons: list[str] = []
    while True:
        layouts = Layouts(function, parameters, candidates)
        try:
            layouts.run()
        except Disqualified as kept:
            candidates.discard(kept.axis)
            reasons.append(f"{kept.axis}: {kept.reason}")
            continue
        except Refused as refused:
            return Plan(reason=str(refused))
        unlooped = sorted(candidates - set(layouts.looped))
        if unlooped:
            candidates -= set(unlooped)
            reasons.extend(f"{axis}: no loop over its sub-blocks" for axis in unlooped)
            continue
        break
    order = positions(function, candidates)
    return Plan({axis: next(p for p in subs if axis_of(p) == axis) for axis in candidates}, order, layouts.subs,
                layouts.extents, layouts.constants, sorted(layouts.stores),
                sorted((layouts.masked or set()) & candidates),
                "; ".join(reasons) or ("" if candidates else "no BLOCK_SUB parameter"))

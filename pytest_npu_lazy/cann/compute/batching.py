"""A launch's programs run k at a time where that provably changes no value: the same rows, fewer Python calls.

Triton's interpreter runs a launch's programs one after another, each a Python call of the whole kernel over
its block; what it costs is per program (every ``tl`` operation is Python, over a NumPy array of the block),
not per element. Inductor launches a 1-D grid of ``ceil(xnumel / XBLOCK)`` programs, and torch_npu's tile
heuristics pick a small ``XBLOCK``: torch_npu's own op test ``test_sum_add.py`` sums (32, 64, 128, 2048)
float32 in 262,144 programs of 8 rows, hours in the interpreter, a second in NumPy.

Program ``p`` of such a kernel covers rows ``[p * XBLOCK, (p + 1) * XBLOCK)``. Where the kernel's *only*
use of the program id is ``xoffset = tl.program_id(0) * XBLOCK``, ``k`` consecutive programs are one program
of ``XBLOCK * k`` rows: the same rows in the same order (``k`` divides the grid, so the last block ends where
the launch's last block ends, masked or not), each row computed by the same operations on the same values.
That holds when nothing in the kernel relates two rows, which is read from its source before it is allowed:

- ``tl.program_id`` appears only as ``tl.program_id(0) * XBLOCK`` and ``XBLOCK`` is a parameter (a kernel
  that declares ``XBLOCK: tl.constexpr = 1`` inside, or reads ``tl.num_programs``, runs as launched);
- every reduction and scan names its axis as a constant of at least 1 (rows are axis 0; Inductor reduces
  along ``r``), and nothing reshapes, permutes, transposes, sorts, gathers, joins or multiplies blocks
  (which could move a row's values into another's);
- no atomics and no barriers (their order is the order of programs), and a pointer the kernel both loads
  and stores is read and written at the same offset expression (a row's own read-modify-write; a read of
  another program's output would see it written in sequence and not when run together);
- only Triton's language, torch's and torch_npu's helpers and Python's builtins are called (a helper of
  another module could read the program id where this check cannot see it);
- at run time: a 1-D grid given as a tuple, ``XBLOCK`` passed by name, and no two tensor arguments sharing
  memory unless they are the same tensor.

Anything else runs program by program, exactly as before. ``k`` is the largest power of two dividing the
grid that keeps a block within :data:`MAX_BLOCK_ELEMENTS` (the other block sizes the kernel declares
multiplied in). The ledger's detail of each launch says how its programs ran. Set
``PYTEST_NPU_LAZY_PROGRAMS_ONE_BY_ONE=1`` to run every launch program by program (the benchmark compares).
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
from dataclasses import dataclass

from .host_kernels import storage_range

#: run every launch program by program (``1``): the interpreter's own schedule, for comparison
ONE_BY_ONE_ENV = "PYTEST_NPU_LAZY_PROGRAMS_ONE_BY_ONE"
#: the most elements one block of a merged program may hold (XBLOCK * k times the kernel's other block sizes)
MAX_BLOCK_ELEMENTS = 1 << 18
#: the block-size parameter of the rows a 1-D Inductor grid is launched over
ROWS = "XBLOCK"

#: functions of triton.language that reduce or scan, their axis being the second argument (or ``axis=``)
_TL_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum", "cumprod",
                  "associative_scan", "reduce_or"}
#: torch's and torch_npu's triton_helpers that reduce, with the position of their axis argument
_HELPER_REDUCTIONS = {"prod": 1, "min2": 1, "max2": 1, "any": 1, "max_with_index": 2, "min_with_index": 2,
                      "welford": 3, "online_softmax_reduce": 2, "select_one": 2}
#: calls that could move a row's values into another row, or read another program's
_MOVES_VALUES = {"reshape", "view", "permute", "trans", "sort", "gather", "join", "split", "dot", "flip",
                 "interleave", "histogram", "ravel", "cat", "swizzle2d", "dot_scaled", "make_block_ptr",
                 "advance", "make_tensor_descriptor", "load_tensor_descriptor", "store_tensor_descriptor",
                 "inline_asm_elementwise", "sort_with_index", "exclusive_scan_decoupled_lookback",
                 "exclusive_scan_decoupled_lookback_64", "x_grid_barrier"}
#: calls whose effect is ordered by the order of programs
_ORDERED = {"debug_barrier", "num_programs"}
#: the modules an Inductor kernel calls into by these names
_HELPER_MODULES = {"tl", "triton_helpers", "libdevice", "tl_math", "extension", "math", "triton"}
#: methods of a tensor value that keep rows where they are
_ROW_METHODS = {"to", "broadcast_to", "expand_dims"}
_BUILTINS = {"range", "min", "max", "len", "int", "float", "bool", "abs", "tuple", "list"}


@dataclass(frozen=True)
class Plan:
    """How a kernel's programs may run: ``reason`` says why they run one by one where they must."""

    mergeable: bool
    reason: str = ""
    other_block_elements: int = 1


def _call_name(node: ast.Call) -> tuple[str | None, str]:
    """(module or object name, attribute) of ``a.b(...)``, (None, name) of ``name(...)``."""
    func = node.func
    if isinstance(func, ast.Attribute):
        base = func.value
        return (base.id if isinstance(base, ast.Name) else "<expr>"), func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return "<expr>", ""


def _one_axis_reshape(call: ast.Call) -> ast.expr | None:
    """The shape of ``tl.reshape(x, [N])`` or ``x.reshape([N])``, a reshape to one axis (torch_npu's index codegen
    writes them around its loads and masks), else None."""
    owner, name = _call_name(call)
    position = 1 if owner == "tl" else 0
    shape = call.args[position] if name == "reshape" and len(call.args) == position + 1 and not call.keywords \
        else None
    return shape if isinstance(shape, (ast.List, ast.Tuple)) and len(shape.elts) == 1 else None


def _axis(node: ast.Call, position: int) -> int | None:
    """The constant axis a reduction or scan names (at ``position``, or ``axis=``/``dim=``), else None."""
    value = node.args[position] if len(node.args) > position else next(
        (k.value for k in node.keywords if k.arg in ("axis", "dim")), None)
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value
    return None


def _is_rows_offset(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """``tl.program_id(0)`` multiplied by ``XBLOCK`` (either side)."""
    call = node
    if not (isinstance(call, ast.Call) and len(call.args) == 1 and not call.keywords
            and isinstance(call.args[0], ast.Constant) and call.args[0].value == 0):
        return False
    product = parents.get(call)
    if not (isinstance(product, ast.BinOp) and isinstance(product.op, ast.Mult)):
        return False
    other = product.right if product.left is call else product.left
    return isinstance(other, ast.Name) and other.id == ROWS


def _pointer_base(expr: ast.AST) -> str | None:
    """The pointer argument an address expression starts from (``in_out_ptr0 + (x0)`` -> ``in_out_ptr0``)."""
    while isinstance(expr, ast.BinOp):
        expr = expr.left
    return expr.id if isinstance(expr, ast.Name) else None


def plan_source(source: str, parameters: list[str]) -> Plan:
    """Whether the kernel whose ``def`` is ``source`` may run its programs together, and why not where not."""
    if ROWS not in parameters:
        return Plan(False, f"{ROWS} is not a parameter")
    function = ast.parse(textwrap.dedent(source)).body[0]
    parents = {child: parent for parent in ast.walk(function) for child in ast.iter_child_nodes(parent)}
    blocks = 1
    loads: dict[str, set[str]] = {}
    stores: dict[str, set[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if ROWS in names:
                return Plan(False, f"{ROWS} is reassigned in the kernel")
            value = node.value
            if (any(n.endswith("BLOCK") or n.endswith("BLOCK_SUB") for n in names)
                    and isinstance(value, ast.Constant) and isinstance(value.value, int)):
                blocks *= max(1, value.value)
        if not isinstance(node, ast.Call):
            continue
        owner, name = _call_name(node)
        if name == "program_id":
            if not _is_rows_offset(node, parents):
                return Plan(False, f"tl.program_id is used other than as tl.program_id(0) * {ROWS}")
            continue
        if name.startswith("atomic_") or name in _ORDERED:
            return Plan(False, f"{name}: its order is the order of programs")
        if name in _MOVES_VALUES:
            return Plan(False, f"{name} could move a row's values into another row")
        if owner is None:
            if name not in _BUILTINS:
                return Plan(False, f"calls {name}(), which this check cannot read")
            continue
        position = None
        if owner in _HELPER_MODULES:
            position = _HELPER_REDUCTIONS.get(name) if owner == "triton_helpers" else (
                1 if name in _TL_REDUCTIONS else None)
        elif name in _TL_REDUCTIONS:
            position = 0  # a method: value.sum(axis)
        elif name not in _ROW_METHODS:
            return Plan(False, f"calls {owner}.{name}, which this check cannot read")
        if position is not None:
            axis = _axis(node, position)
            if axis is None or axis < 1:
                return Plan(False, f"{owner}.{name} reduces along axis {axis if axis is not None else '?'}, "
                                   "not a constant of at least 1 (rows are axis 0)")
        if name in ("load", "store") and node.args:
            base = _pointer_base(node.args[0])
            if base not in parameters:
                return Plan(False, f"a {name} from an address that does not start at a pointer argument")
            (loads if name == "load" else stores).setdefault(base, set()).add(ast.dump(node.args[0]))
    for pointer in set(loads) & set(stores):
        if len(loads[pointer] | stores[pointer]) != 1:
            return Plan(False, f"{pointer} is loaded and stored at different offsets")
    return Plan(True, other_block_elements=blocks)


@functools.lru_cache(maxsize=512)
def _plan_for(code: object, parameters: tuple[str, ...]) -> Plan:
    try:
        source = inspect.getsource(code)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return Plan(False, "its source cannot be read")
    try:
        return plan_source(source, list(parameters))
    except SyntaxError:
        return Plan(False, "its source does not parse on its own")


def plan(fn, parameters: list[str]) -> Plan:
    """The plan of a kernel function (the interpreter's rewritten one: its code keeps the file and lines)."""
    return _plan_for(getattr(fn, "__code__", fn), tuple(parameters))


def _overlapping(tensors: list) -> bool:
    """Two different tensor arguments that share memory (the same tensor twice is the kernel's own business)."""
    spans = sorted((*storage_range(tensor), id(tensor)) for tensor in tensors)
    return any(b_start < a_end and a_id != b_id for (_, a_end, a_id), (b_start, _, b_id) in zip(spans, spans[1:]))


def merge_factor(executor, args: tuple, kwargs: dict) -> tuple[int, str]:
    """How many programs of this launch run as one (1: one by one), and the ledger's words for it."""
    if os.environ.get(ONE_BY_ONE_ENV) == "1":
        return 1, f"programs one by one ({ONE_BY_ONE_ENV}=1)"
    grid = executor.grid
    if callable(grid) or not isinstance(grid, (tuple, list)) or not grid:
        return 1, "programs one by one: a grid computed at launch"
    dims = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    if dims[1] != 1 or dims[2] != 1 or dims[0] < 2:
        return 1, "programs one by one: not a 1-D grid of several programs"
    rows = kwargs.get(ROWS)
    if not isinstance(rows, int) or rows < 1 or rows & (rows - 1):
        return 1, f"programs one by one: {ROWS} not passed by name as a power of two"
    decided = plan(executor.fn, list(executor.arg_names))
    if not decided.mergeable:
        return 1, f"programs one by one: {decided.reason}"
    tensors = [value for value in (*args, *kwargs.values()) if hasattr(value, "untyped_storage")]
    if _overlapping(tensors):
        return 1, "programs one by one: two tensor arguments share memory"
    # every other compile-time constant passed at launch (a looped reduction's R0_BLOCK, torch_npu's XBLOCK_SUB, a
    # chunk size) counts as if it multiplied XBLOCK's block: an overestimate, never an underestimate
    others = decided.other_block_elements
    for key in getattr(executor, "constexprs", ()):
        value = kwargs.get(key)
        if key != ROWS and isinstance(value, int) and not isinstance(value, bool) and value > 1:
            others *= value
    k = 1
    while dims[0] % (2 * k) == 0 and rows * 2 * k * others <= MAX_BLOCK_ELEMENTS:
        k *= 2
    if k == 1:
        return 1, "programs one by one: no larger block divides the grid within the size limit"
    return k, f"programs {k} at a time ({dims[0]} programs of {ROWS}={rows} as {dims[0] // k} of {rows * k})"

"""A reduction loop's iterations run together where that provably changes no value: the same sums, in the same order.

Inductor writes a reduction too long for one block as a loop over chunks of ``R0_BLOCK`` elements
(``for r0_offset in tl.range(0, r0_numel, R0_BLOCK)``) folding each chunk into ``[XBLOCK, R0_BLOCK]`` lanes,
reduced after the loop. The interpreter runs each iteration as Python over one chunk: torch_npu's
``test_sum.py`` sums 999,983 elements with a kernel compiled for 8, in 125,000 iterations of ~100 us.

Lane ``j`` of the accumulator folds elements ``j, j + R0_BLOCK, j + 2 * R0_BLOCK, ...`` one after
another. Here ``L`` iterations run as one: the loop's body computes a chunk ``L`` times as wide (its
loads and pointwise operations give each element the value they gave it in its own iteration), and
the accumulator folds the wide chunk's ``L`` slices into its lanes in iteration order
(:func:`fold`): ``np.add.accumulate``, which adds one slice after another by definition, never
pairwise; a masked element adds ``-0.0`` (or ``0``), which leaves every value, ``-0.0`` and NaN
included, as the original ``tl.where`` kept it. Bit for bit what the loop computes, read from the
kernel's source before it is allowed (:func:`plan_loop`):

- the loop is ``for OFFSET in tl.range(0, NUMEL, STEP)`` (or ``range``) at the kernel's top level,
  ``STEP`` a parameter or a ``tl.constexpr`` set to a number (torch_npu's index codegen writes the same loop as
  ``for i in range((NUMEL + STEP - 1) // STEP)`` reading ``i * STEP``, and reshapes to one axis: read as this
  loop, :func:`_over_chunks`); its body only assigns names and loads (no stores, branches, nested loops,
  reductions, scans, atomics, or calls this check cannot read: :mod:`.batching`'s rules);
- every value carried from one iteration to the next is an accumulator updated as Inductor writes a
  sum, ``tmp = acc + value`` then ``acc = tl.where(mask, tmp, acc)`` (or ``acc = tmp``), and read
  nowhere else; nothing else computed in the loop is read after it;
- ``STEP`` appears in the body only as a block size (``tl.arange``, ``tl.full``, ``broadcast_to``), the
  offset only added to a lane index (``r0_offset + r0_base``), and no value made before the loop with the
  chunk's shape is read in it (other than the lane index, which is remade wide).

At run time ``L`` is the largest divisor of the iteration count that keeps the wide chunk within
:data:`.batching.MAX_BLOCK_ELEMENTS` (so the wide loop covers exactly the original iterations, no more);
where that is 1, or an accumulator's last axis is not ``STEP``, the original loop runs, kept verbatim
beside the wide one (for the index codegen's loop, the form it was read as: the same iterations and
offsets). Float32/float64/int32/int64 accumulators fold with NumPy; any other type folds slice by slice
with the interpreter's own operations (exact, slower). Anything else about the kernel runs as written.
The ledger's detail of each launch says how its loops ran. ``PYTEST_NPU_LAZY_LOOPS_ONE_BY_ONE=1`` runs
every loop iteration by iteration (the benchmark compares).
"""

from __future__ import annotations

import ast
import copy
import math
import os

from .batching import (_BUILTINS, _HELPER_MODULES, _HELPER_REDUCTIONS, _MOVES_VALUES, _ORDERED, _ROW_METHODS,
                       _TL_REDUCTIONS, MAX_BLOCK_ELEMENTS, _axis, _call_name, _one_axis_reshape)

#: run every reduction loop iteration by iteration (``1``): the interpreter's own schedule, for comparison
ONE_BY_ONE_ENV = "PYTEST_NPU_LAZY_LOOPS_ONE_BY_ONE"
#: the names the rewritten kernel calls (put in its module's globals)
WIDTH, FOLD = "__npu_lazy_loop_width", "__npu_lazy_loop_fold"
#: calls whose shape may hold the chunk's size
_SIZED = {"full", "zeros", "broadcast_to"}
#: what each launch's loops did, said by :func:`loop_width` while the kernel runs (read by the launch)
NOTES: list[str] = []


def _reads(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def _target(statement: ast.stmt) -> str | None:
    """The one name an ``x = ...`` or ``x: T = ...`` statement assigns, else None."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value is not None:
        return statement.target.id
    return None


def _value(statement: ast.stmt) -> ast.expr:
    """What an assignment or expression statement evaluates (the statements a foldable loop holds)."""
    value = getattr(statement, "value", None)
    return value if isinstance(value, ast.expr) else ast.Constant(None)


def _assigned(statements: list[ast.stmt]) -> set[str]:
    return {n.id for s in statements for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _call_problem(call: ast.Call) -> str | None:
    """Why a call inside a loop could relate two elements of a chunk (or cannot be read), else None."""
    owner, name = _call_name(call)
    if _one_axis_reshape(call) is not None:
        return None
    if name in _TL_REDUCTIONS or (owner == "triton_helpers" and name in _HELPER_REDUCTIONS):
        return f"{owner or ''}{'.' if owner else ''}{name} reduces inside the loop"
    if name.startswith("atomic_") or name in _ORDERED or name in _MOVES_VALUES:
        return f"{name} inside the loop"
    if name == "store":
        return "it stores inside the loop"
    if owner is None:
        return None if name in _BUILTINS else f"it calls {name}(), which this check cannot read"
    if owner in _HELPER_MODULES or name in _ROW_METHODS:
        return None
    return f"it calls {owner}.{name}, which this check cannot read"


#: reductions whose result has no axis of the chunk (scans keep it)
_SCANS = {"cumsum", "cumprod", "associative_scan"}


def _untainted_reads(node: ast.AST) -> list[str]:
    """Names read by ``node`` outside any reduction along an axis past the first (whose result has no axis of the
    chunk; a scan keeps it)."""
    if isinstance(node, ast.Call):
        owner, name = _call_name(node)
        position = (_HELPER_REDUCTIONS.get(name) if owner == "triton_helpers"
                    else 1 if name in _TL_REDUCTIONS - _SCANS and owner in _HELPER_MODULES else None)
        if position is not None and (_axis(node, position) or 0) >= 1:
            return []
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return [node.id]
    return [name for child in ast.iter_child_nodes(node) for name in _untainted_reads(child)]


def _as_size(call: ast.Call, argument: ast.AST, leaf: ast.AST) -> bool:
    """Whether ``leaf`` (inside ``argument``, a direct argument of ``call``) is the last size of a shape that
    ``tl.full``/``tl.zeros``/``broadcast_to`` makes: the chunk's axis, last, as Inductor lays blocks out (never a
    fill value, never ``tl.arange``, whose values and not only its size depend on it)."""
    name = _call_name(call)[1]
    keyword = next((k.arg for k in call.keywords if k.value is argument), None)
    position = next((i for i, a in enumerate(call.args) if a is argument), None)
    if _one_axis_reshape(call) is argument:  # a chunk made the chunk again: one axis, so no element moves
        return True
    if isinstance(argument, (ast.List, ast.Tuple)):
        last = argument.elts[-1] if argument.elts else None
        shape = position == (0 if name in ("full", "zeros") else 1) or keyword == "shape"
        return last is leaf and shape and name in _SIZED
    # broadcast_to(x, A, B): sizes as separate arguments, the last of them
    return name == "broadcast_to" and position is not None and position == len(call.args) - 1 and position >= 1


def _sizes_only(node: ast.AST, names: set[str]) -> bool:
    """Every read of ``names`` in ``node`` is the chunk's size in a shape (:func:`_as_size`)."""
    parents = {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}
    for leaf in ast.walk(node):
        if isinstance(leaf, ast.Name) and leaf.id in names and isinstance(leaf.ctx, ast.Load):
            argument: ast.AST = leaf
            up = parents.get(leaf)
            if isinstance(up, (ast.List, ast.Tuple)):
                argument, up = up, parents.get(up)
            if isinstance(up, ast.keyword):  # shape=[...]: the keyword's value is the argument
                up = parents.get(up)
            if not (isinstance(up, ast.Call) and _as_size(up, argument, leaf)):
                return False
    return True


def _is_lane_index(value: ast.expr, sizes: set[str]) -> bool:
    """``tl.arange(0, STEP)`` or ``tl.arange(0, STEP)[None, :]``: the lanes of one chunk, along its last axis."""
    if isinstance(value, ast.Subscript):
        index = value.slice
        if not (isinstance(index, ast.Tuple) and len(index.elts) == 2 and isinstance(index.elts[0], ast.Constant)
                and index.elts[0].value is None and isinstance(index.elts[1], ast.Slice)
                and index.elts[1].lower is None and index.elts[1].upper is None and index.elts[1].step is None):
            return False
        value = value.value
    return (isinstance(value, ast.Call) and _call_name(value) == ("tl", "arange") and len(value.args) == 2
            and not value.keywords and isinstance(value.args[0], ast.Constant) and value.args[0].value == 0
            and isinstance(value.args[1], ast.Name) and value.args[1].id in sizes)


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if isinstance(node.ctx, ast.Load) and node.id in self.names:
            return ast.copy_location(ast.Name(self.names[node.id], ast.Load()), node)
        return node


#: accumulator -> (the value added, the mask of its ``tl.where`` or None, the name of the sum)
Folds = dict[str, tuple[ast.expr, "ast.expr | None", str]]


def _accumulators(body: list[ast.stmt], defined_before: set[str]) -> tuple[Folds, str]:
    """The values carried from one iteration to the next (read in the body before the body assigns them), each a
    sum folded as Inductor folds one; or why not."""
    written = _assigned(body)
    carried: list[str] = []
    seen: set[str] = set()
    for statement in body:
        carried += [n for n in _reads(_value(statement)) if n in written and n not in seen and n not in carried]
        seen.add(_target(statement) or "")
    folds: Folds = {}
    position = {_target(s): i for i, s in enumerate(body) if _target(s)}
    body_reads = [n for s in body for n in _reads(s)]
    for accumulator in carried:
        if accumulator not in defined_before or sum(_target(s) == accumulator for s in body) != 1:
            return {}, f"{accumulator} is carried from one iteration to the next, not made before the loop"
        mask: ast.expr | None = None
        chosen = _value(body[position[accumulator]])
        if isinstance(chosen, ast.Call) and _call_name(chosen) == ("tl", "where") and len(chosen.args) == 3 \
                and isinstance(chosen.args[2], ast.Name) and chosen.args[2].id == accumulator:
            mask, chosen = chosen.args[0], chosen.args[1]
        total = chosen.id if isinstance(chosen, ast.Name) and sum(_target(s) == chosen.id for s in body) == 1 else None
        combined = _value(body[position[total]]) if total is not None else None
        if not (total is not None and isinstance(combined, ast.BinOp) and isinstance(combined.op, ast.Add)
                and isinstance(combined.left, ast.Name) and combined.left.id == accumulator):
            return {}, f"{accumulator} is carried from one iteration to the next other than as a sum acc + value"
        if body_reads.count(accumulator) != (2 if mask is not None else 1) or body_reads.count(total) != 1:
            return {}, f"{accumulator} (or its sum {total}) is read in the loop other than to fold it"
        between = _assigned(body[position[total] + 1:position[accumulator]])
        if set(_reads(combined.right)) & between:  # the fold evaluates the value where the where stood
            return {}, f"what {total} adds is assigned again before {accumulator} takes it"
        folds[accumulator] = (combined.right, mask, total)
    return folds, ""


def _read_after(statements: list[ast.stmt], others: set[str]) -> str | None:
    """The first of ``others`` (values of the loop's last iteration) that ``statements`` read before assigning it
    again for certain (a later loop's body reads its own target and what it assigned first; its target is not
    assigned for certain after it, a loop may run no iteration)."""
    others = set(others)
    for statement in statements:
        if isinstance(statement, ast.For):
            late = [n for n in _reads(statement.iter) if n in others]
            if late:
                return late[0]
            target = {n.id for n in ast.walk(statement.target) if isinstance(n, ast.Name)}
            inner = _read_after(statement.body, others - target)
            if inner:
                return inner
            continue
        late = [n for n in _reads(statement) if n in others]
        if late:
            return late[0]
        others.discard(_target(statement) or "")
    return None


def _lanes(before: list[ast.stmt], step: str, wide: str, folds: Folds) -> tuple[dict[str, str], list[ast.stmt], set[str]]:
    """What the wide loop reads instead of what was made before the loop: the block size (and its aliases) as the
    wide size, each lane index (``tl.arange(0, STEP)[None, :]``, and aliases) remade wide; and the names whose
    values have the chunk's shape and cannot be remade (the loop must not read them)."""
    renames, tainted = {step: wide}, {step}
    remade: list[ast.stmt] = []
    for statement in before:
        name = _target(statement)
        if name == step:  # the block size a kernel sets itself (R0BLOCK_SUB: tl.constexpr = 8) keeps its mark
            continue
        for reassigned in _assigned([statement]) - {step}:  # made again: what it was no longer holds
            dropped = renames.pop(reassigned, None)
            if dropped is not None and dropped != wide:
                renames = {k: v for k, v in renames.items() if v != dropped}
                remade = [r for r in remade if _target(r) != dropped]
        if name is None:  # a loop, a branch, a tuple assignment: whatever they assign may have the chunk's shape
            tainted |= _assigned([statement])
            continue
        value = _value(statement)
        if name in folds:  # an accumulator's start: its lanes stay the chunk's, folded into, never remade
            tainted.add(name)
        elif isinstance(value, ast.Name) and value.id in renames:
            renames[name] = renames[value.id]  # an alias (RBLOCK: tl.constexpr = R0_BLOCK; rbase = r0_base)
            tainted.add(name)
        elif _is_lane_index(value, {n for n, w in renames.items() if w == wide}):
            renames[name] = f"{name}__wide"
            copy_ = _Rename(renames).visit(copy.deepcopy(statement))
            if isinstance(copy_, ast.Assign):
                copy_.targets = [ast.Name(renames[name], ast.Store())]
            elif isinstance(copy_, ast.AnnAssign):
                copy_.target = ast.Name(renames[name], ast.Store())
            remade.append(copy_)
            tainted.add(name)
        elif set(_untainted_reads(value)) & tainted:
            tainted.add(name)
        else:
            tainted.discard(name)
    return renames, remade, tainted


def _offset_problem(body: list[ast.stmt], offset: str, lanes: set[str]) -> str | None:
    """The loop's offset (and its aliases, followed through) and the lane indices are read only as
    ``offset + lane``: what gives each element of the wide chunk the index it had in its own iteration."""
    offsets = {offset}
    for statement in body:
        value = _value(statement)
        if isinstance(value, ast.Name) and value.id in offsets:
            offsets.add(_target(statement) or "")
    for statement in body:
        parents = {child: parent for parent in ast.walk(statement) for child in ast.iter_child_nodes(parent)}
        value = _value(statement)
        alias = isinstance(value, ast.Name) and value.id in offsets
        for leaf in ast.walk(statement):
            if not (isinstance(leaf, ast.Name) and isinstance(leaf.ctx, ast.Load) and leaf.id in offsets | lanes):
                continue
            if alias and leaf is value:
                continue
            up = parents.get(leaf)
            other = (up.right if up.left is leaf else up.left) if isinstance(up, ast.BinOp) else None
            pair = {leaf.id, other.id} if isinstance(other, ast.Name) else set()
            if not (isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add) and pair & offsets and pair & lanes):
                return (f"the loop's offset {leaf.id} is used other than added to a lane index" if leaf.id in offsets
                        else f"the lane index {leaf.id} is used other than added to the loop's offset")
    return None


def plan_loop(statements: list[ast.stmt], index: int, parameters: set[str]) -> tuple[list[ast.stmt] | None, str]:
    """The statements that replace the loop ``statements[index]`` of a kernel's top level (the chunk's width, then
    an ``if`` choosing the wide loop or the original one at run time), or None and why the loop must run iteration
    by iteration."""
    loop = statements[index]
    if not isinstance(loop, ast.For) or loop.orelse or not isinstance(loop.target, ast.Name):
        return None, "not a plain for loop"
    iterator = loop.iter
    if not (isinstance(iterator, ast.Call) and _call_name(iterator)[1] == "range" and len(iterator.args) == 3
            and not iterator.keywords and isinstance(iterator.args[0], ast.Constant) and iterator.args[0].value == 0
            and isinstance(iterator.args[2], ast.Name) and iterator.args[2].id in parameters):
        return None, "not a loop tl.range(0, numel, BLOCK) over a block-size parameter"
    offset, step, numel = loop.target.id, iterator.args[2].id, iterator.args[1]
    body = loop.body
    for statement in body:
        if _target(statement) is None and not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
            return None, f"a {type(statement).__name__} statement in the loop"
        for call in (n for n in ast.walk(statement) if isinstance(n, ast.Call)):
            problem = _call_problem(call)
            if problem:
                return None, problem
    before = statements[:index]
    folds, reason = _accumulators(body, _assigned(before) | parameters)
    if reason:
        return None, reason
    late = _read_after(statements[index + 1:], (_assigned(body) | {offset}) - set(folds))
    if late:
        return None, f"{late}, computed in the loop, is read after it"
    wide = f"{step}__wide"
    renames, remade, tainted = _lanes(before, step, wide, folds)
    written = _assigned(body)
    for statement in body:
        for name in _reads(statement):
            if name in tainted and name not in renames and name not in folds and name not in written | {offset}:
                return None, f"{name}, made before the loop, has the chunk's shape"
        if not _sizes_only(statement, {n for n, w in renames.items() if w == wide}):
            return None, f"{step} is used in the loop other than as the chunk's size in a shape"
    problem = _offset_problem(body, offset, {n for n, w in renames.items() if w != wide})
    if problem:
        return None, problem
    if not folds:
        return None, "no accumulator to fold (nothing carried from one iteration to the next)"
    return _rewritten(loop, step, wide, numel, renames, remade, folds), "iterations together"


def _rewritten(loop: ast.For, step: str, wide: str, numel: ast.expr, renames: dict[str, str], remade: list[ast.stmt],
               folds: Folds) -> list[ast.stmt]:
    totals = {total for _, _, total in folds.values()}
    wide_loop = copy.deepcopy(loop)
    assert isinstance(wide_loop.iter, ast.Call) and isinstance(loop.target, ast.Name)  # plan_loop checked both
    wide_loop.iter.args[2] = ast.Name(wide, ast.Load())
    body = []
    for statement in wide_loop.body:
        name = _target(statement)
        if name in totals:
            continue
        statement = _Rename(renames).visit(statement)
        if name in folds:
            value, mask, _ = folds[name]
            arguments = [ast.Name(name, ast.Load()), _Rename(renames).visit(copy.deepcopy(value)),
                         _Rename(renames).visit(copy.deepcopy(mask)) if mask is not None else ast.Constant(None),
                         ast.Name(step, ast.Load()), ast.Name(wide, ast.Load())]
            statement.value = ast.Call(ast.Name(FOLD, ast.Load()), arguments, [])
        body.append(statement)
    wide_loop.body = body
    width = ast.AnnAssign(ast.Name(wide, ast.Store()), ast.Attribute(ast.Name("tl", ast.Load()), "constexpr", ast.Load()),
                          ast.Call(ast.Name(WIDTH, ast.Load()), [copy.deepcopy(numel), ast.Name(step, ast.Load()),
                                   ast.Constant(loop.target.id)] + [ast.Name(a, ast.Load()) for a in folds], []),
                          simple=1)
    chosen = ast.If(ast.Compare(ast.Name(wide, ast.Load()), [ast.NotEq()], [ast.Name(step, ast.Load())]),
                    remade + [wide_loop], [loop])
    for node in (width, chosen):
        ast.copy_location(node, loop)
        ast.fix_missing_locations(node)
    return [width, chosen]


def _over_chunks(statements: list[ast.stmt], index: int, sizes: set[str]) -> ast.For | None:
    """torch_npu's index codegen's loop over a reduction, ``loops = (NUMEL + STEP - 1) // STEP`` then
    ``for i in range(loops):`` reading ``i`` only as ``(i * STEP)``, as the loop Inductor writes: ``for offset in
    range(0, NUMEL, STEP)`` with ``offset`` for ``i * STEP`` (the same iterations, the same offsets); else None."""
    loop = statements[index]
    if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Call)
            and _call_name(loop.iter) == (None, "range") and len(loop.iter.args) == 1
            and isinstance(loop.iter.args[0], ast.Name)):
        return None
    count, counter = loop.iter.args[0].id, loop.target.id
    made = [i for i, statement in enumerate(statements[:index]) if count in _assigned([statement])]
    value = _value(statements[made[-1]]) if made and _target(statements[made[-1]]) == count else None
    numel = getattr(getattr(getattr(value, "left", None), "left", None), "left", None)  # (NUMEL + STEP - 1) // STEP
    size: str = getattr(getattr(value, "right", None), "id", "")
    if value is None or numel is None or size not in sizes \
            or ast.unparse(value) != f"({ast.unparse(numel)} + {size} - 1) // {size}":
        return None
    if counter in _assigned(loop.body) or _read_after(statements[index + 1:], {counter}) \
            or _assigned(statements[made[-1] + 1:index]) & ({size} | set(_reads(numel))):
        return None  # the counter is more than the chunk's number, or the count's sizes change before the loop
    offset = f"{counter}__offset"

    class _Offsets(ast.NodeTransformer):
        def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
            names = [n.id for n in (node.left, node.right) if isinstance(n, ast.Name)]
            if isinstance(node.op, ast.Mult) and sorted(names) == sorted([counter, size]):
                return ast.copy_location(ast.Name(offset, ast.Load()), node)
            return self.generic_visit(node)

    body = [_Offsets().visit(copy.deepcopy(statement)) for statement in loop.body]
    if counter in _reads(ast.Module(body=body, type_ignores=[])):
        return None  # the counter read other than as i * STEP
    iterator = ast.parse(f"range(0, {ast.unparse(numel)}, {size})", mode="eval").body
    canonical = ast.For(ast.Name(offset, ast.Store()), iterator, body, [], None)
    return ast.fix_missing_locations(ast.copy_location(canonical, loop))


def fold_loops(function: ast.FunctionDef) -> list[str]:
    """Rewrite, in place, each top-level loop of a kernel that may run its iterations together; per loop, what
    was decided (``over r0_offset: iterations together`` or why not). A block size is a parameter or a top-level
    ``tl.constexpr`` set to a number (torch_npu's ``R1BLOCK_SUB: tl.constexpr = 64``)."""
    statements = list(function.body)
    parameters = {a.arg for a in function.args.args + function.args.kwonlyargs} | {
        _target(s) or "" for s in statements if isinstance(s, ast.AnnAssign) and isinstance(s.value, ast.Constant)
        and isinstance(s.value.value, int) and "constexpr" in ast.unparse(s.annotation)}
    said, body = [], []
    for index, statement in enumerate(statements):
        if not isinstance(statement, ast.For):
            body.append(statement)
            continue
        canonical = _over_chunks(statements, index, parameters)
        if canonical is not None:
            replacement, reason = plan_loop(statements[:index] + [canonical] + statements[index + 1:], index,
                                            parameters)
        else:
            replacement, reason = plan_loop(statements, index, parameters)
        target = statement.target.id if isinstance(statement.target, ast.Name) else "?"
        said.append(f"loop over {target}: {reason}")
        body += replacement if replacement is not None else [statement]
    function.body = body
    return said


# --------------------------------------------------------------------------- run time, inside the kernel


def _number(value) -> int:
    """An interpreted scalar (a one-element tensor), a ``tl.constexpr`` or a plain int, as an int."""
    handle = getattr(value, "handle", None)
    if handle is not None:
        return int(handle.data.reshape(-1)[0])
    return int(getattr(value, "value", value))


def _largest_divisor(count: int, most: int) -> int:
    best = 1
    divisor = 1
    while divisor * divisor <= count:
        if count % divisor == 0:
            for candidate in (divisor, count // divisor):
                if best < candidate <= most:
                    best = candidate
        divisor += 1
    return best


def loop_width(numel, step: int, offset: str, *accumulators) -> int:
    """The chunk the loop over ``offset`` takes at a time: ``step`` times the most iterations that divide the
    loop and fit the block limit, or ``step`` itself (the original loop runs)."""
    if os.environ.get(ONE_BY_ONE_ENV) == "1":
        NOTES.append(f"loop over {offset} iteration by iteration ({ONE_BY_ONE_ENV}=1)")
        return step
    count = max(0, -(-_number(numel) // step))
    if not all(hasattr(getattr(a, "handle", None), "data") for a in accumulators):
        NOTES.append(f"loop over {offset} iteration by iteration: an accumulator is not a block")
        return step
    shapes = [tuple(a.handle.data.shape) for a in accumulators]
    if any(not shape or shape[-1] != step for shape in shapes):
        NOTES.append(f"loop over {offset} iteration by iteration: an accumulator's last axis is not {step}")
        return step
    per_iteration = max(math.prod(shape) for shape in shapes)
    together = _largest_divisor(count, max(1, MAX_BLOCK_ELEMENTS // per_iteration))
    if together == 1:
        NOTES.append(f"loop over {offset} iteration by iteration: {count} iterations, no divisor fits")
        return step
    NOTES.append(f"loop over {offset}: {count} iterations as {count // together} of {together} together")
    return step * together


#: accumulators NumPy adds exactly as the interpreter's ``+`` does (IEEE, or wrapping integers)
_NUMPY_EXACT = {"fp32", "fp64", "int32", "int64"}


def fold(accumulator, value, mask, step: int, width: int):
    """``accumulator`` after folding each ``step``-wide slice of the wide ``value`` into it in order, where
    ``mask`` holds: what ``acc = tl.where(mask, acc + value_i, acc)`` gives, iteration after iteration."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    acc = accumulator.handle.data
    together = width // step
    dtype = accumulator.dtype
    mask_data = _data(mask) if mask is not None else np.bool_(True)
    # the wide operands' shape; an accumulator the sum would grow by broadcasting folds slice by slice below
    wide_shape = np.broadcast_shapes(acc.shape[:-1] + (width,), np.shape(_data(value)), np.shape(mask_data))
    values = np.broadcast_to(_data(value), wide_shape)
    masks = np.broadcast_to(mask_data, wide_shape)
    exact = (str(dtype) in _NUMPY_EXACT and isinstance(value, tl.tensor) and value.dtype == dtype
             and (mask is None or (isinstance(mask, tl.tensor) and mask.dtype == tl.int1))
             and wide_shape[:-1] + (step,) == acc.shape and not _checks_integer_overflow(dtype))
    if exact:
        identity = np.array(-0.0 if dtype.is_floating() else 0, dtype=acc.dtype)
        lanes = acc.shape[:-1] + (together, step)
        added = np.where(masks, values, identity).reshape(lanes)
        stacked = np.concatenate([acc[..., None, :], added], axis=-2)
        result = np.add.accumulate(stacked, axis=-2, dtype=acc.dtype)[..., -1, :]
        # a lane no iteration added to keeps its bits (a signalling NaN that + -0.0 would quiet)
        result = np.where(masks.reshape(lanes).any(axis=-2), result, acc)
        return tl.tensor(TensorHandle(np.ascontiguousarray(result), dtype), accumulator.type)
    for i in range(together):  # slice by slice, with the interpreter's own + and where (its numerics included)
        piece = slice(i * step, (i + 1) * step)
        part = _block(values[..., piece], value)
        total = accumulator + part
        accumulator = total if mask is None else tl.where(_block(masks[..., piece], mask), total, accumulator)
    return accumulator


def _checks_integer_overflow(dtype) -> bool:
    """Whether the interpreter's ``+`` of this type asserts on overflow (a debug launch of a narrow integer), which
    NumPy's wrapping add would not."""
    if not dtype.is_int() or dtype.int_bitwidth >= 64:
        return False
    from triton.runtime.interpreter import interpreter_builder

    options = interpreter_builder.options
    return bool(getattr(options, "debug", False) and getattr(options, "sanitize_overflow", False))


def _data(value):
    handle = getattr(value, "handle", None)
    return handle.data if handle is not None else value


def _block(data, like):
    """A slice of a wide operand as an interpreted tensor of the operand's type (a plain value stays as it is)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if not isinstance(like, tl.tensor):
        return like
    scalar = like.dtype
    return tl.tensor(TensorHandle(np.ascontiguousarray(data), scalar), tl.block_type(scalar, list(data.shape)))


def install(interpreter) -> str | None:
    """Rewrite each kernel's foldable loops as the interpreter rewrites its source (once per kernel); what stands."""
    rewriter = interpreter.FunctionRewriter
    if getattr(rewriter, "_npu_lazy_loops", False):
        return None
    if not all(hasattr(rewriter, n) for n in ("_transform_ast", "ast_transformer")):
        return None  # another interpreter: its loops run as written

    def _transform_ast(self, src):
        parsed = ast.parse(src)
        function = parsed.body[0] if parsed.body else None
        if isinstance(function, ast.FunctionDef):
            said = fold_loops(function)
            if said:
                DECIDED[(self.filename, self.def_file_lineno)] = "; ".join(said)
                globals_ = self.fn.__globals__
                globals_.setdefault(WIDTH, loop_width)
                globals_.setdefault(FOLD, fold)
        transformed = self.ast_transformer.visit(parsed)
        ast.fix_missing_locations(transformed)
        ast.increment_lineno(transformed, self.def_file_lineno - 1)
        return transformed

    rewriter._transform_ast = _transform_ast
    rewriter._npu_lazy_loops = True
    return ("a reduction loop's iterations run together where its source shows a sum folded lane by lane "
            "(the same additions in the same order: pytest_npu_lazy.cann.compute.loops)")


#: (file, line of the def) of each rewritten kernel -> what was decided about its loops
DECIDED: dict[tuple[str, int], str] = {}


def decided(fn) -> str:
    """What :func:`fold_loops` decided about the loops of the interpreter's rewritten function ``fn``."""
    code = getattr(fn, "__code__", None)
    return DECIDED.get((code.co_filename, code.co_firstlineno), "") if code is not None else ""

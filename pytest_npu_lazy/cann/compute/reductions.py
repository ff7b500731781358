"""Reductions and scans of an interpreted kernel: the device's semantics, and a fast path that checks what it replaces.

Triton's interpreter reduces ``tl.standard``'s combine functions with NumPy and everything else
element by element in Python. Two kinds of change, each named in the header:

**The device's semantics** (triton-ascend's statement of them: its interpreter work, PR #1346, and
``AscendReduceOps``):

- ``tl.max``/``tl.min`` combine with ``tl.maximum``/``tl.minimum`` without NaN propagation
  (maxNum/minNum): a NaN loses to any number, and only an all-NaN row gives NaN. The interpreter
  as shipped reduces them with ``np.max``/``np.min``, where NaN wins.
- float16 sums and cumulative sums accumulate in float32 and round once, as the NPU compiler
  emits them; NumPy would add in float16.
- integer sums and scans keep their type and wrap as the device's adders do; NumPy would widen
  int32 to int64 (and the interpreter would store those 8-byte values through 4-byte pointers).

**The fast path.** Inductor's ``min``/``max``/``argmin``/``argmax`` combine with its own
``triton_helpers.minimum``/``maximum`` (and ``*_with_index``), which the interpreter would reduce
element by element (an ``amin`` over 1024 rows took 42 s). Those are reduced with NumPy under
their own rules (NaN wins; among equal values the lowest index), but only after checking that the
function *is* the one this was written for: its body, and the bodies of the helpers it calls, must
equal :data:`INDUCTOR_COMBINES`, torch's source, statement for statement. A function of the same
name with another body (another torch, or a regression in torch's helpers) runs in the
interpreter as written, exactly, only slower. The index path also needs indices that grow along
the axis (else ties are not "the lowest index" by position).
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import numpy as np

#: torch's combine functions (torch/_inductor/runtime/triton_helpers.py) and the helpers they call, as the fast
#: path was written for them: a function is reduced with NumPy only where its body and every helper's equal these
INDUCTOR_COMBINES = '''
def promote_to_tensor(x):
    return x + tl.zeros((1,), tl.int1)

def is_floating(x):
    return promote_to_tensor(x).dtype.is_floating()

def minimum(a, b):
    mask = a < b
    if is_floating(a):
        mask |= a != a
    return tl.where(mask, a, b)

def maximum(a, b):
    mask = a > b
    if is_floating(a):
        mask |= a != a
    return tl.where(mask, a, b)

def minimum_with_index(a_value, a_index, b_value, b_index):
    mask = a_value < b_value
    equal = a_value == b_value
    if is_floating(a_value):
        a_isnan = a_value != a_value
        b_isnan = b_value != b_value
        mask |= a_isnan & (not b_isnan)
        equal |= a_isnan & b_isnan
    mask |= equal & (a_index < b_index)
    return tl.where(mask, a_value, b_value), tl.where(mask, a_index, b_index)

def maximum_with_index(a_value, a_index, b_value, b_index):
    mask = a_value > b_value
    equal = a_value == b_value
    if is_floating(a_value):
        a_isnan = a_value != a_value
        b_isnan = b_value != b_value
        mask |= a_isnan & (not b_isnan)
        equal |= a_isnan & b_isnan
    mask |= equal & (a_index < b_index)
    return tl.where(mask, a_value, b_value), tl.where(mask, a_index, b_index)
'''

#: what each verified combine function is reduced with: (value reduction, index reduction or None)
FAST = {"minimum": (np.min, None), "maximum": (np.max, None),
        "minimum_with_index": (np.min, np.argmin), "maximum_with_index": (np.max, np.argmax)}
#: the helpers each combine function calls, checked with it
CALLS = {"minimum": ("is_floating", "promote_to_tensor"), "maximum": ("is_floating", "promote_to_tensor"),
         "minimum_with_index": ("is_floating", "promote_to_tensor"),
         "maximum_with_index": ("is_floating", "promote_to_tensor")}


def _shape(function_def: ast.FunctionDef) -> str:
    """A function's arguments and statements, without its decorators and docstring: what it computes."""
    body = function_def.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    return "\n".join([ast.dump(function_def.args), *(ast.dump(statement) for statement in body)])


def _shapes_of(source: str) -> dict[str, str]:
    tree = ast.parse(textwrap.dedent(source))
    return {node.name: _shape(node) for node in tree.body if isinstance(node, ast.FunctionDef)}


_EXPECTED = _shapes_of(INDUCTOR_COMBINES)


def _python_function(value):
    """The Python function behind a ``@triton.jit`` function (or the function itself)."""
    return getattr(value, "fn", value)


def _shape_of_function(function) -> str | None:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    shapes = _shapes_of(source)
    return shapes.get(getattr(function, "__name__", ""))


class CombineCheck:
    """Which combine functions the fast path may replace: those whose code equals :data:`INDUCTOR_COMBINES`."""

    def __init__(self) -> None:
        self._verdicts: dict[object, str | None] = {}

    def fast_ops(self, combine_fn):
        """(value op, index op) for a verified combine function, else None (it runs as written)."""
        function = _python_function(combine_fn)
        name = getattr(function, "__name__", None)
        if name not in FAST:
            return None
        if function not in self._verdicts:
            self._verdicts[function] = self._difference(function, name)
        return FAST[name] if self._verdicts[function] is None else None

    def difference(self, combine_fn) -> str | None:
        """Why a function of a fast-path name runs as written (None: it is the one the fast path replaces)."""
        function = _python_function(combine_fn)
        self.fast_ops(combine_fn)
        return self._verdicts.get(function)

    @staticmethod
    def _difference(function, name: str) -> str | None:
        if _shape_of_function(function) != _EXPECTED[name]:
            return f"{name}'s body is not torch's (pytest_npu_lazy.cann.compute.reductions.INDUCTOR_COMBINES)"
        scope = getattr(function, "__globals__", {})
        for helper in CALLS[name]:
            if _shape_of_function(_python_function(scope.get(helper))) != _EXPECTED[helper]:
                return f"{name} calls a {helper} whose body is not torch's"
        return None


COMBINES = CombineCheck()


def _fast_reduce(self, inputs, ops):
    value_op, index_op = ops
    values = inputs[0].handle.data
    if index_op is None:
        return self.to_tensor(value_op(values, axis=self.axis, keepdims=self.keep_dims), inputs[0].dtype)
    indices = inputs[1].handle.data
    if values.shape[self.axis] > 1 and not np.all(np.diff(indices, axis=self.axis) > 0):
        return None  # ties go to the lowest index, which positions give only where it grows along the axis
    where = np.expand_dims(index_op(values, axis=self.axis), self.axis)
    picked = [np.take_along_axis(data, where, axis=self.axis) for data in (values, indices)]
    if not self.keep_dims:
        picked = [np.squeeze(data, axis=self.axis) for data in picked]
    return tuple(self.to_tensor(data, operand.dtype) for data, operand in zip(picked, inputs))


def accumulate(function, data: np.ndarray, axis, **kwargs) -> np.ndarray:
    """A sum or scan as the device accumulates: float16 in float32 rounded once, integers in their own type."""
    if data.dtype == np.float16:
        return accumulate(function, data.astype(np.float32), axis, **kwargs).astype(np.float16)
    if np.issubdtype(data.dtype, np.integer):
        return function(data, axis=axis, dtype=data.dtype, **kwargs)
    if function is np.sum and axis is not None and data.ndim > 1:
        return _sum_along_the_last_axis(data, axis, kwargs.get("keepdims", False))
    return function(data, axis=axis, **kwargs)


def _sum_along_the_last_axis(data: np.ndarray, axis: int, keepdims: bool) -> np.ndarray:
    """A float sum along one axis in an order that depends on that axis's length only, not on the block's other axes.

    NumPy adds along the axis its iterator puts innermost: pairwise (eight running sums, then a tree) where the
    reduced axis is the contiguous one, one slice after the other where it is not; and a block whose other axes
    have size 1 collapses so that the reduced axis becomes the contiguous one. So ``np.sum`` of the same row could
    round differently in a (32, 1, 1, 256) block and a (32, 4, 1, 2048) one, and running a kernel's sub-blocks
    wide (:mod:`.widening`) would change a value. Here every row is summed as a contiguous last axis, pairwise:
    the row's own values and length decide its bits. A device's order is its own; none is claimed here."""
    moved = np.ascontiguousarray(np.moveaxis(data, axis, -1))
    total = np.sum(moved, axis=-1)
    return np.expand_dims(total, axis) if keepdims else total


def install(interpreter) -> list[str]:
    """The device's reduction and scan semantics, and the checked fast path, in the interpreter; returns what
    was changed, for the header. Nothing here reads ``triton.language`` (still loading, maybe) until a kernel runs."""
    reduce_ops, scan_ops = interpreter.ReduceOps, interpreter.ScanOps
    if getattr(reduce_ops, "_npu_lazy_reductions", False):
        return []
    as_shipped = reduce_ops.apply_impl
    ignoring_nan: dict = {}

    def apply_impl(self, inputs):
        if not ignoring_nan:  # tl.max / tl.min of this Triton: their combine functions
            import triton.language as tl

            ignoring_nan.update({getattr(tl.standard, "_elementwise_max", None): np.fmax,
                                 getattr(tl.standard, "_elementwise_min", None): np.fmin})
            ignoring_nan.pop(None, None)
        ignore_nan = ignoring_nan.get(self.combine_fn)
        if ignore_nan is not None:
            return self.to_tensor(ignore_nan.reduce(inputs[0].handle.data, axis=self.axis, keepdims=self.keep_dims),
                                  inputs[0].dtype)
        ops = COMBINES.fast_ops(self.combine_fn) if self.axis is not None else None
        if ops is not None:
            fast = _fast_reduce(self, inputs, ops)
            if fast is not None:
                return fast
        return as_shipped(self, inputs)

    def reduce_sum(self, input):
        return self.to_tensor(accumulate(np.sum, input.handle.data, self.axis, keepdims=self.keep_dims), input.dtype)

    def scan(function):
        return lambda self, input: [self.to_tensor(accumulate(function, input.handle.data, self.axis),
                                                   dtype=input.dtype)]

    reduce_ops.apply_impl = apply_impl
    reduce_ops.sum = reduce_sum
    scan_ops.cumsum = scan(np.cumsum)
    scan_ops.cumprod = scan(np.cumprod)
    reduce_ops._npu_lazy_reductions = True
    return ["tl.max/tl.min ignore NaN (maxNum/minNum)", "float16 sums and scans in float32",
            "integer sums and scans wrap in their type",
            "Inductor's min/max/argmin/argmax combines reduced with NumPy where their code is torch's"]

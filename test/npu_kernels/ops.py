"""The operators the op tests compile, by kind, with the dtypes torch_npu's own op tests give them.

Each entry: ``name -> (function, dtypes, arity)``; a function takes tensors made by
``testutils.generate_tensor``. The names follow torch_npu's ``test/_inductor/test_<op>.py`` files.
Nothing here imports torch at import time: the functions reach it when they run.
"""

from __future__ import annotations


def _t():
    import torch

    return torch


def _f():
    import torch.nn.functional as functional

    return functional


FLOATS = ("float32", "float16", "bfloat16")
INTS = ("int64", "int32")
#: operators defined on positive inputs only: their inputs are made positive (as torch_npu's tests make them), so the
#: compiled function stays the one operator
POSITIVE = frozenset({"div", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal", "pow"})

POINTWISE = {
    "abs": (lambda x: _t().abs(x), FLOATS + INTS, 1),
    "add": (lambda x, y: x + y, FLOATS + INTS, 2),
    "sub": (lambda x, y: x - y, FLOATS + INTS, 2),
    "mul": (lambda x, y: x * y, FLOATS + INTS, 2),
    "div": (lambda x, y: x / y, FLOATS, 2),
    "neg": (lambda x: -x, FLOATS + INTS, 1),
    "cos": (lambda x: _t().cos(x), FLOATS, 1),
    "sin": (lambda x: _t().sin(x), FLOATS, 1),
    "exp": (lambda x: _t().exp(x), FLOATS, 1),
    "exp2": (lambda x: _t().exp2(x), FLOATS, 1),
    "expm1": (lambda x: _t().expm1(x), FLOATS, 1),
    "log": (lambda x: _t().log(x), FLOATS, 1),
    "log2": (lambda x: _t().log2(x), FLOATS, 1),
    "log1p": (lambda x: _t().log1p(x), FLOATS, 1),
    "sqrt": (lambda x: _t().sqrt(x), FLOATS, 1),
    "rsqrt": (lambda x: _t().rsqrt(x), FLOATS, 1),
    "reciprocal": (lambda x: _t().reciprocal(x), FLOATS, 1),
    "ceil": (lambda x: _t().ceil(x), FLOATS, 1),
    "floor": (lambda x: _t().floor(x), FLOATS, 1),
    "round": (lambda x: _t().round(x), FLOATS, 1),
    "trunc": (lambda x: _t().trunc(x), FLOATS, 1),
    "sign": (lambda x: _t().sign(x), FLOATS + INTS, 1),
    "relu": (lambda x: _t().relu(x), FLOATS + INTS, 1),
    "sigmoid": (lambda x: _t().sigmoid(x), FLOATS, 1),
    "tanh": (lambda x: _t().tanh(x), FLOATS, 1),
    "tan": (lambda x: _t().tan(x * 0.5), FLOATS, 1),
    "atan": (lambda x: _t().atan(x), FLOATS, 1),
    "erf": (lambda x: _t().erf(x), FLOATS, 1),
    "gelu": (lambda x: _f().gelu(x), FLOATS, 1),
    "silu": (lambda x: _f().silu(x), FLOATS, 1),
    "clamp": (lambda x: _t().clamp(x, -0.5, 0.5), FLOATS + INTS, 1),
    "pow": (lambda x: _t().pow(x, 2.5), FLOATS, 1),
    "maximum": (lambda x, y: _t().maximum(x, y), FLOATS + INTS, 2),
    "minimum": (lambda x, y: _t().minimum(x, y), FLOATS + INTS, 2),
    "where": (lambda x, y: _t().where(x > 0, x, y), FLOATS + INTS, 2),
    "eq": (lambda x, y: _t().eq(x, y), FLOATS + INTS, 2),
    "ne": (lambda x, y: _t().ne(x, y), FLOATS + INTS, 2),
    "ge": (lambda x, y: _t().ge(x, y), FLOATS + INTS, 2),
    "gt": (lambda x, y: _t().gt(x, y), FLOATS + INTS, 2),
    "le": (lambda x, y: _t().le(x, y), FLOATS + INTS, 2),
    "lt": (lambda x, y: _t().lt(x, y), FLOATS + INTS, 2),
    "isnan": (lambda x: _t().isnan(x / x), FLOATS, 1),
    "bitwise_and": (lambda x, y: x & y, INTS, 2),
    "bitwise_or": (lambda x, y: x | y, INTS, 2),
    "bitwise_xor": (lambda x, y: x ^ y, INTS, 2),
    "remainder": (lambda x: _t().remainder(x, 3), INTS, 1),
    "floor_divide": (lambda x: _t().floor_divide(x, 4), INTS, 1),
    "logical_and": (lambda x, y: _t().logical_and(x > 0, y > 0), FLOATS + INTS, 2),
    "to_float": (lambda x: x.to(_t().float32) * 2, INTS + ("float16", "bfloat16"), 1),
}

#: the second argument's shape, for each broadcast: x has the dtype's demo shape
BROADCAST = {
    "row": (lambda x, y: x * y, lambda shape: shape[-1:]),
    "column": (lambda x, y: x - y, lambda shape: (*shape[:-1], 1)),
    "scalar_tensor": (lambda x, y: x + y, lambda shape: ()),
    "outer": (lambda x, y: x.unsqueeze(-1) * y, lambda shape: (4,)),
}

VIEWS = {
    "transpose": lambda x: x.transpose(0, 1) + 1,
    "permute": lambda x: x.permute(*reversed(range(x.dim()))).contiguous() * 2,
    "slice_step": lambda x: x[..., 1::2] * 2,
    "narrow": lambda x: x.narrow(0, 1, x.shape[0] - 2) + 1,
    "expand": lambda x: x[..., :1].expand(*x.shape) + x,
    "reshape": lambda x: x.reshape(-1) * 3,
    "unsqueeze_cat": lambda x: _t().cat([x, x * 2], dim=-1),
    "stack": lambda x: _t().stack([x, -x]).sum(0),
    "flip": lambda x: x.flip(0) + 1,
    "select": lambda x: x[1] * 2,
}

def _affine(x, low: float, high: float):
    """A layer norm's weight or bias for ``x``: evenly spaced over [low, high], on its device, in its dtype."""
    return _t().linspace(low, high, x.shape[-1], device=x.device).to(x.dtype)


REDUCTIONS = {
    "sum_last": lambda x: x.sum(dim=-1),
    "sum_first": lambda x: x.sum(dim=0),
    "sum_all": lambda x: x.sum(),
    "mean": lambda x: x.mean(dim=-1),
    "amax": lambda x: x.amax(dim=-1),
    "amin": lambda x: x.amin(dim=0),
    "max_dim": lambda x: x.max(dim=-1),
    "argmax": lambda x: x.argmax(dim=-1),
    "argmin": lambda x: x.argmin(dim=0),
    "var": lambda x: x.var(dim=-1),
    "std": lambda x: x.std(dim=0),
    "prod": lambda x: x[..., :8].prod(dim=-1),
    "logsumexp": lambda x: _t().logsumexp(x, dim=-1),
    "softmax": lambda x: _t().softmax(x, dim=-1),
    "log_softmax": lambda x: _t().log_softmax(x, dim=-1),
    "layer_norm": lambda x: _f().layer_norm(x, x.shape[-1:]),
    "layer_norm_affine": lambda x: _f().layer_norm(x, x.shape[-1:], _affine(x, 0.5, 1.5), _affine(x, -1.0, 1.0)),
    "sum_keepdim_sub": lambda x: x - x.sum(dim=-1, keepdim=True),
    "any": lambda x: (x > 1).any(dim=-1),
    "cumsum": lambda x: x.cumsum(dim=-1),
    "mean_in_float32": lambda x: x.mean(dim=-1, dtype=_t().float32),
    "max_all": lambda x: x.max(),
    "min_all": lambda x: x.min(),
    "min_dim": lambda x: x.min(dim=0),
}
#: reductions over integers, as torch_npu's tests give them (sum, max, argmax), and their min twins (an integer min takes
#: another path than a float one in torch_npu's triton_helpers._extremum)
INT_REDUCTIONS = ("sum_last", "sum_first", "amax", "amin", "argmax", "argmin", "max_dim", "min_dim", "cumsum")

"""Where a compiled NPU result differs from eager for a reason of torch_npu's own, or of numerics: read, never tried.

Each finding reads the installed torch_npu source for the construct that makes the difference (or None where that
construct is gone, so the strict xfail turns into an unexpected pass and the table is updated), and says exactly
which difference it accounts for: :meth:`Finding.account` compares the two results after that difference, and any
other difference fails the test instead of being taken into the xfail. docs/npu-kernels.md and docs/emulated-npu.md
("Findings") say the same in words.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Callable


def _source(package: str, *parts: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = os.path.join(list(spec.submodule_search_locations)[0], *parts)
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


class BeyondTheFinding(AssertionError):
    """The compiled result differs from eager in more than the finding explains: a failure, never an xfail."""


@dataclass(frozen=True)
class Finding:
    """A known difference: why (``reason``), and ``account(compiled, eager, inputs, op)``, which raises
    :class:`BeyondTheFinding` unless the difference is exactly the documented one."""

    reason: str
    account: Callable[[Any, Any, tuple, Callable], None]


def _cpu(value):
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, value)


# --------------------------------------------------------------------------- integer cumsum in int32


def integer_cumsum_compiles_to_int32() -> str | None:
    """torch_npu's cumsum lowering gives integer and bool inputs dtype int32 off the Ascend 950; eager gives int64."""
    if "dtype = torch.int64 if is_ascend950 else torch.int32" not in _source("torch_npu", "_inductor", "lowering.py"):
        return None
    return ("torch_npu's cumsum lowering (torch_npu/_inductor/lowering.py) compiles an integer cumsum to int32 "
            "off the Ascend 950, where eager returns int64: on any device; the values are equal")


def account_int32_cumsum(compiled, eager, inputs, op) -> None:
    """Only the dtype differs: int32 where eager has int64, every value equal."""
    import torch

    compiled, eager = _cpu(compiled), _cpu(eager)
    if (compiled.dtype, eager.dtype) != (torch.int32, torch.int64):
        raise BeyondTheFinding(f"expected the compiled cumsum in int32 beside eager's int64, got {compiled.dtype} "
                               f"and {eager.dtype}")
    if not torch.equal(compiled.to(torch.int64), eager):
        wrong = (compiled.to(torch.int64) != eager).nonzero()[:5].tolist()
        raise BeyondTheFinding(f"the compiled int32 cumsum's values differ from eager's, not only its dtype: at {wrong}")


# --------------------------------------------------------------------------- arg extrema over NaN


def arg_extremum_ignores_nan() -> str | None:
    """torch_npu's max_with_index/min_with_index take the extremum with tl.max/tl.min, which ignore NaN on the NPU."""
    source = _source("torch_npu", "_inductor", "runtime", "triton_helpers.py")
    if "tl.where(value == peak_bcast, index, filler)" not in source or "return tl.max(value, dim)" not in source:
        return None
    return ("torch_npu's max_with_index/min_with_index (torch_npu/_inductor/runtime/triton_helpers.py) take the "
            "extremum with tl.max/tl.min, which ignore NaN on the NPU (maxNum/minNum, as triton-ascend states), then "
            "the lowest index holding it: on a row holding NaN the compiled argmax/argmin (and max/min(dim)'s index) "
            "is the first position of the row's largest/smallest number, where eager's is the first NaN's; the "
            "values agree (NaN): on any device")


def account_nan_rows(compiled, eager, inputs, op, values_ignore_nan: bool = False) -> None:
    """Indices equal eager's on rows without NaN, and on each row with NaN are the first position of the row's
    extremum with NaN ignored. Values equal eager's everywhere (NaN where eager has NaN); with ``values_ignore_nan``,
    on rows with NaN they are the extremum with NaN ignored instead."""
    import torch

    (x,) = inputs
    compiled, eager, x = _cpu(compiled), _cpu(eager), x.detach().cpu()
    ignoring = op(torch.where(torch.isnan(x), float("-inf") if _wants_max(op, x) else float("inf"), x))
    nan_rows = torch.isnan(x).any(dim=_reduced_dim(x, eager))
    if not nan_rows.any():
        raise BeyondTheFinding("no row holds NaN: the finding explains nothing here")
    for got, want, ignored in zip(_parts(compiled), _parts(eager), _parts(ignoring)):
        if got.is_floating_point() and not values_ignore_nan:
            if not torch.equal(torch.isnan(got), torch.isnan(want)) or not torch.equal(
                    got[~torch.isnan(want)], want[~torch.isnan(want)]):
                raise BeyondTheFinding("the compiled values differ from eager's: the finding is about indices only")
            continue
        what = "values" if got.is_floating_point() else "indices"
        if not torch.equal(got[~nan_rows], want[~nan_rows]):
            rows = (~nan_rows & (got != want)).nonzero()[:5].flatten().tolist()
            raise BeyondTheFinding(f"{what} of rows without NaN differ from eager (rows {rows}): not the NaN finding")
        if not torch.equal(got[nan_rows], ignored[nan_rows]):
            rows = (nan_rows & (got != ignored)).nonzero()[:5].flatten().tolist()
            raise BeyondTheFinding(f"{what} of rows with NaN differ from the NaN-ignoring extremum's (rows {rows})")


# --------------------------------------------------------------------------- the index codegen's min over NaN


def index_codegen_min_ignores_nan() -> str | None:
    """torch_npu's index codegen propagates NaN in a max reduction only: its min is tl.min, which ignores NaN."""
    source = _source("torch_npu", "_inductor", "codegen", "triton.py")
    if 'if reduction_type in {"max"}:' not in source or "propagate_nan=True)" not in source:
        return None
    return ("torch_npu's index codegen (torch_npu/_inductor/codegen/triton.py, final_reduction) writes "
            "tl.max(value, dim, propagate_nan=True) for a max reduction and tl.min(value, dim) for a min: tl.min "
            "ignores NaN on the NPU (minNum, as triton-ascend states), so the compiled amin, and min(dim)'s value, of "
            "a row holding NaN is the row's smallest number where eager's is NaN (max is right): on any device where "
            "the index codegen's TTIR check compiles")


def account_min_ignoring_nan(compiled, eager, inputs, op) -> None:
    """Values (and min(dim)'s indices) equal eager's on rows without NaN; on rows with NaN they are the row's
    smallest number and its first position."""
    account_nan_rows(compiled, eager, inputs, op, values_ignore_nan=True)


def _parts(result) -> list:
    return list(result) if isinstance(result, tuple) else [result]


def _wants_max(op, x) -> bool:
    probe = op(__import__("torch").tensor([[0.0, 1.0]]).to(x.dtype))
    value = _parts(probe)[-1].flatten()[0].item()
    return value in (1, 1.0)


def _reduced_dim(x, eager) -> int:
    shape = _parts(eager)[0].shape
    return next(d for d in range(x.dim()) if tuple(x.shape[:d]) + tuple(x.shape[d + 1:]) == tuple(shape))


# --------------------------------------------------------------------------- rounding between operators


#: eager rounds the row sum to float16/bfloat16 before subtracting it; Inductor's kernel keeps it in float32
ROUNDS_BETWEEN = ("numerics of two operators, not a wrong kernel: eager rounds the row sum to {dtype} before "
                  "subtracting it (ATen rounds each operator's result), Inductor's kernel keeps the sum in float32 "
                  "and rounds once; where the subtraction cancels, the two differ by more than {dtype}'s tolerance. "
                  "The compiled result equals the float32 computation rounded once")


#: mantissa bits of the low-precision dtypes: one step (ulp) of a value in [2**e, 2**(e+1)) is 2**(e - bits)
MANTISSA_BITS = {"bfloat16": 7, "float16": 10}


def account_rounds_once(compiled, eager, inputs, op) -> None:
    """The compiled result is the same operators in float32, rounded once to the dtype (Inductor's numerics): within
    one step of the float32 value everywhere (rounding once is half a step; float32 summation order, which no two
    devices share, moves the float32 value by far less than a step, so across a tie by at most one)."""
    import torch

    compiled = _cpu(compiled)
    exact = _cpu(op(*(x.detach().cpu().float() for x in inputs)))
    bits = MANTISSA_BITS[str(compiled.dtype).replace("torch.", "")]
    _, exponent = torch.frexp(exact)
    smallest = -14 if bits == 10 else -126  # below it, steps are those of the subnormals
    step = torch.pow(2.0, torch.clamp(exponent - 1, min=smallest) - bits)
    off = (compiled.float() - exact).abs() / step
    if not (off <= 1).all():
        worst = int(off.argmax())
        raise BeyondTheFinding(f"the compiled result is not the float32 computation rounded once either: "
                               f"{float(off.flatten()[worst]):.1f} steps from it at flat index {worst} "
                               f"({compiled.flatten()[worst].item()} vs {exact.flatten()[worst].item()})")


def known() -> dict[tuple[str, str], Finding]:
    """(test, dtype) -> the finding that accounts for its difference, for the op tests."""
    table: dict[tuple[str, str], Finding] = {}
    for dtype in ("float16", "bfloat16"):
        table[("reduction:sum_keepdim_sub", dtype)] = Finding(ROUNDS_BETWEEN.format(dtype=dtype), account_rounds_once)
    cumsum = integer_cumsum_compiles_to_int32()
    if cumsum:
        for key in (("reduction:cumsum", "int64"), ("cumsum_scalar", "int64"), ("cumsum_bool", "bool")):
            table[key] = Finding(cumsum, account_int32_cumsum)
    nan = arg_extremum_ignores_nan()
    if nan:
        for name in ("argmax", "argmin", "max_dim", "min_dim"):
            table[(f"nan_and_ties:{name}", "float32")] = Finding(nan, account_nan_rows)
    index_min = index_codegen_min_ignores_nan()
    if index_min:
        table[("nan_and_ties:amin", "float32")] = Finding(index_min, account_min_ignoring_nan)
        both = f"{index_min}; and for its index: {nan}" if nan else index_min
        table[("nan_and_ties:min_dim", "float32")] = Finding(both, account_min_ignoring_nan)
    return table

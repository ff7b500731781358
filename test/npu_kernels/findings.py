"""Where a compiled NPU result differs from eager for a reason of torch_npu's own, or of numerics: read, never tried.

Each function reads the installed torch_npu source for the construct that makes the difference and returns
the reason (or None where that construct is gone, so the strict xfail turns into an unexpected pass and
the table is updated). docs/npu-kernels.md and docs/emulated-npu.md ("Findings") say the same in words.
"""

from __future__ import annotations

import importlib.util
import os


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


def integer_cumsum_compiles_to_int32() -> str | None:
    """torch_npu's cumsum lowering gives integer and bool inputs dtype int32 off the Ascend 950; eager gives int64."""
    if "dtype = torch.int64 if is_ascend950 else torch.int32" not in _source("torch_npu", "_inductor", "lowering.py"):
        return None
    return ("torch_npu's cumsum lowering (torch_npu/_inductor/lowering.py) compiles an integer cumsum to int32 "
            "off the Ascend 950, where eager returns int64: on any device")


def arg_extremum_misses_nan() -> str | None:
    """torch_npu's max_with_index/min_with_index pick the index where value == the extremum: never a NaN."""
    if "tl.where(value == peak_bcast, index, filler)" not in _source("torch_npu", "_inductor", "runtime",
                                                                      "triton_helpers.py"):
        return None
    return ("torch_npu's max_with_index/min_with_index (torch_npu/_inductor/runtime/triton_helpers.py) take the "
            "lowest index whose value equals the extremum; a NaN equals nothing, so for a row holding NaN the "
            "compiled argmax/argmin/max(dim) index is not eager's (the NaN's): on any device")


#: eager rounds to float16/bfloat16 after every operator; Inductor's kernel computes in float32 and rounds once
ROUNDS_ONCE = ("numerics: eager rounds the row sum to {dtype} before subtracting it, Inductor's kernel subtracts "
               "in float32 and rounds once; where the difference cancels, the two differ by more than {dtype}'s "
               "tolerance (a documented difference, docs/emulated-npu.md, not a wrong kernel)")


def known() -> dict[tuple[str, str], str]:
    """(test, dtype) -> reason, for the op tests."""
    table: dict[tuple[str, str], str] = {}
    for dtype in ("float16", "bfloat16"):
        table[("reduction:sum_keepdim_sub", dtype)] = ROUNDS_ONCE.format(dtype=dtype)
    cumsum = integer_cumsum_compiles_to_int32()
    if cumsum:
        table[("reduction:cumsum", "int64")] = cumsum
        table[("cumsum_scalar", "int64")] = cumsum
        table[("cumsum_bool", "bool")] = cumsum
    nan = arg_extremum_misses_nan()
    if nan:
        for name in ("argmax", "argmin", "max_dim"):
            table[(f"nan_and_ties:{name}", "float32")] = nan
    return table

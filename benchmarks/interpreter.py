"""Triton's interpreter as compute mode runs it: kernels' throughput against NumPy, and what the device numerics cost.

``--only interpreter``. Each variant runs in a fresh interpreter with ``TRITON_INTERPRET=1``:
``shipped`` (the interpreter as triton-ascend ships it, with only the bridge without which its loops
stop on NumPy 2.4) and ``compute`` (with compute mode's
changes: device conversions and NaN rules, bfloat16 arithmetic in float32, the device's
reductions, programs and a sum's loop iterations run together, sub-blocks run wide; ``compute one by one``
without the last three). Each times the same kernels side by side: a float32 pointwise kernel, a float32 ->
bfloat16 pointwise kernel (where the device's rounding replaces the shipped truncation), a
persistent row reduction and a looped one (``tl.range`` over the row, written as Inductor writes a looped
sum), each launched over a grid of blocks as Inductor launches them, a first-axis sum written as torch_npu's
index codegen writes one (loops over sub-blocks of each pointwise axis), and a sum of the whole array by one
program in chunks of 8 (torch_npu's ``test_sum.py`` calls a kernel compiled for 8 elements with a million). Beside each, NumPy's one vectorised evaluation of the same
expression over the whole array: the limit an interpreter of the same data can approach. Figures
are elements per second (median of the repeats), and the ratio to NumPy's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import REPO, log

RESULT = "interpreter"
#: the device numerics must not make a kernel slower than this, against the interpreter as shipped (both one
#: program at a time); and programs run together must bring every kernel within this factor of NumPy's time
TARGETS = {"numerics_over_shipped_max": ("<=", 1.5), "compute_over_numpy_max": ("<=", 10.0)}

SCRIPT = r"""
import json, os, statistics, sys, time
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np
import torch
import triton
import triton.language as tl

variant, size, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from pytest_npu_lazy.cann.compute import interpreter
if variant.startswith("compute"):
    if variant == "compute one by one":
        os.environ["PYTEST_NPU_LAZY_PROGRAMS_ONE_BY_ONE"] = "1"
        os.environ["PYTEST_NPU_LAZY_LOOPS_ONE_BY_ONE"] = "1"
        os.environ["PYTEST_NPU_LAZY_SUBBLOCKS_AS_LAUNCHED"] = "1"
    interpreter.install_language_shims()
    interpreter.install_interpreter_shims()
else:  # as shipped, but for the one bridge without which no loop over a reduction runs on NumPy 2.4
    import triton.runtime.interpreter as shipped
    interpreter._index_one_element_arrays(shipped)


@triton.jit
def pointwise(x_ptr, y_ptr, out_ptr, n, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask)
    y = tl.load(y_ptr + offsets, mask)
    tl.store(out_ptr + offsets, x * y + 1.0, mask)


@triton.jit
def downcast(x_ptr, out_ptr, n, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, (tl.load(x_ptr + offsets, mask) * 2.0).to(tl.bfloat16), mask)


@triton.jit
def row_sum(x_ptr, out_ptr, columns, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    cols = tl.arange(0, R0_BLOCK)[None, :]
    x = tl.load(x_ptr + rows * columns + cols, cols < columns)
    tl.store(out_ptr + rows, tl.sum(x, 1)[:, None])


@triton.jit
def looped_row_sum(x_ptr, out_ptr, columns, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
    rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    _total = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, columns, R0_BLOCK):  # as Inductor writes a looped sum
        cols = r0_offset + r0_base
        mask = cols < columns
        tmp0 = tl.load(x_ptr + rows * columns + cols, mask, other=0.0)
        tmp1 = _total + tmp0
        _total = tl.where(mask, tmp1, _total)
    tl.store(out_ptr + rows, tl.sum(_total, 1)[:, None])


@triton.jit
def sub_block_sum(in_ptr0, out_ptr0, y0_numel, x1_numel, Y0BLOCK, Y0BLOCK_SUB: tl.constexpr,
                  X1BLOCK_SUB: tl.constexpr):
    R2BLOCK_SUB: tl.constexpr = 16  # as torch_npu's index codegen writes sum(a, 0) (test_sum_add.py's kernel)
    y0_offset = tl.program_id(0) * Y0BLOCK
    base_y0 = tl.arange(0, Y0BLOCK_SUB)
    loops_y0 = (Y0BLOCK + Y0BLOCK_SUB - 1) // Y0BLOCK_SUB
    base_x1 = tl.arange(0, X1BLOCK_SUB)
    loops_x1 = (x1_numel + X1BLOCK_SUB - 1) // X1BLOCK_SUB
    base_r2 = tl.arange(0, R2BLOCK_SUB)
    for loop_y0 in range(loops_y0):
        y0 = y0_offset + (loop_y0 * Y0BLOCK_SUB) + base_y0[None, :, None]
        y0_mask = y0 < min(Y0BLOCK + y0_offset, y0_numel)
        for loop_x1 in range(loops_x1):
            x1 = (loop_x1 * X1BLOCK_SUB) + base_x1[None, None, :]
            x1_mask = x1 < x1_numel
            r2 = base_r2[:, None, None]
            tmp0 = tl.load(in_ptr0 + (x1 + x1_numel*y0 + x1_numel*y0_numel*r2), x1_mask & y0_mask, other=0.0)
            tmp1 = tl.sum(tmp0, 0).reshape(1, Y0BLOCK_SUB, X1BLOCK_SUB)
            tl.store(out_ptr0 + (x1 + x1_numel*y0), tmp1, x1_mask & y0_mask)


def timed(run):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure():  # the data stays local: the interpreter reads each kernel's globals
    torch.manual_seed(0)
    block, rows_per_program, columns = 1024, 16, 1024
    x, y = torch.randn(size), torch.randn(size)
    out = torch.empty(size)
    half = torch.empty(size, dtype=torch.bfloat16)
    matrix = x.reshape(-1, columns)
    sums = torch.empty(matrix.shape[0])
    total = torch.empty(1)
    grid = (triton.cdiv(size, block),)
    rows_grid = (matrix.shape[0] // rows_per_program,)
    xn, yn, mn = x.numpy(), y.numpy(), matrix.numpy()
    planes = max(1, size // (16 * 1024))  # (16, planes, 1024): summed over its first axis
    cube, plane_sums = x.reshape(16, planes, 1024), torch.empty(planes, 1024)
    per_program = 2 if planes % 2 == 0 else 1
    cases = {
        "pointwise float32 (x*y+1)": (lambda: pointwise[grid](x, y, out, size, XBLOCK=block), lambda: xn * yn + 1.0),
        "pointwise float32 -> bfloat16": (lambda: downcast[grid](x, half, size, XBLOCK=block),
                                           lambda: (xn * 2.0).astype(np.float32)),
        "row sum, persistent (16 rows a program)": (
            lambda: row_sum[rows_grid](matrix, sums, columns, XBLOCK=rows_per_program, R0_BLOCK=columns),
            lambda: mn.sum(axis=1)),
        "row sum, looped (chunks of 128)": (
            lambda: looped_row_sum[rows_grid](matrix, sums, columns, XBLOCK=rows_per_program, R0_BLOCK=128),
            lambda: mn.sum(axis=1)),
        # torch_npu's index codegen: loops over sub-blocks of every pointwise axis (test_sum_add.py's kernel)
        "first-axis sum, index codegen's sub-blocks (1 x 64 of 1024)": (
            lambda: sub_block_sum[(planes // per_program,)](cube, plane_sums, planes, 1024, per_program,
                                                             Y0BLOCK_SUB=1, X1BLOCK_SUB=64),
            lambda: cube.numpy().sum(axis=0)),
        # torch_npu's test_sum.py: a dynamic-shape sum compiled for 8 elements, then called with many more
        "sum of all, looped (one program, chunks of 8)": (
            lambda: looped_row_sum[(1,)](x, total, size, XBLOCK=1, R0_BLOCK=8), lambda: xn.sum()),
    }
    answer = {}
    with np.errstate(all="ignore"):
        for name, (kernel, vectorised) in cases.items():
            kernel()  # warm: the first launch binds the kernel
            answer[name] = {"kernel_s": timed(kernel), "numpy_s": timed(vectorised), "elements": size}
    return answer


print("RESULT " + json.dumps(measure()))
"""


def _run(variant: str, size: int, repeats: int, env: dict[str, str]) -> dict | str:
    environment = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as folder:  # a file, not -c: Triton's interpreter reads a kernel's source
        script = Path(folder, "interpreter_kernels.py")
        script.write_text(SCRIPT)
        done = subprocess.run([sys.executable, str(script), variant, str(size), str(repeats)], env=environment,
                              capture_output=True, text=True, cwd=REPO)
    line = next((text for text in done.stdout.splitlines() if text.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        return f"the {variant} interpreter script failed: {done.stderr[-1500:]}"
    return json.loads(line[len("RESULT "):])


VARIANTS = ("shipped", "compute one by one", "compute")


def bench(args, env: dict[str, str]) -> dict:
    size = 1 << 14 if args.quick else 1 << 20
    repeats = 1 if args.quick else 3
    runs = {}
    for variant in VARIANTS:
        got = _run(variant, size, repeats, env)
        if isinstance(got, str):
            return {"error": got}
        runs[variant] = got
    cases = {}
    for name in runs["compute"]:
        shipped, one_by_one, compute = (runs[v][name] for v in VARIANTS)
        cases[name] = {
            "elements": compute["elements"],
            "numpy_per_s": compute["elements"] / compute["numpy_s"],
            "shipped_per_s": shipped["elements"] / shipped["kernel_s"],
            "one_by_one_per_s": one_by_one["elements"] / one_by_one["kernel_s"],
            "compute_per_s": compute["elements"] / compute["kernel_s"],
            "numerics_over_shipped": one_by_one["kernel_s"] / shipped["kernel_s"],
            "compute_over_numpy": compute["kernel_s"] / compute["numpy_s"],
        }
        log(f"interpreter: {name}: {cases[name]['compute_per_s'] / 1e6:.1f} M elements/s under compute mode "
            f"({cases[name]['compute_over_numpy']:.1f}x NumPy's time; one program at a time "
            f"{cases[name]['one_by_one_per_s'] / 1e6:.2f} M/s, {cases[name]['numerics_over_shipped']:.2f}x the "
            f"shipped interpreter's time), NumPy {cases[name]['numpy_per_s'] / 1e6:.0f} M/s")
    return {"size": size, "repeats": repeats, "cases": cases}


def figures(result: dict) -> dict:
    cases = result.get("cases") or {}
    return {"numerics_over_shipped_max": max((c["numerics_over_shipped"] for c in cases.values()), default=None),
            "compute_over_numpy_max": max((c["compute_over_numpy"] for c in cases.values()), default=None)}


def markdown(result: dict) -> list[str]:
    if "cases" not in result:
        return [f"Interpreter: {result.get('error', 'not measured')}", ""]
    lines = ["### Triton's interpreter under compute mode", "",
             f"{result['size']:,} float32 elements, median of {result['repeats']}; each kernel launched over a grid "
             "of 1024-element blocks (reductions: 16 rows of 1024 a program) as Inductor launches them, named as "
             "Inductor names them. *One by one*: the programs run one after another and a loop's iterations one "
             "after another, as the interpreter runs them (the device numerics' cost against the interpreter as "
             "shipped); *compute mode*: as compute mode runs them, a launch's programs together and a sum's loop "
             "iterations together and the index codegen's sub-blocks wide where the kernel allows it "
             "(docs/emulated-npu.md).", "",
             "| kernel | NumPy, one vectorised pass (M elements/s) | interpreter as shipped (M/s) "
             "| compute mode, one by one (M/s) | compute mode (M/s) | one by one / shipped time "
             "| compute mode / NumPy time |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, case in result["cases"].items():
        lines.append(f"| {name} | {case['numpy_per_s'] / 1e6:.0f} | {case['shipped_per_s'] / 1e6:.2f} | "
                     f"{case['one_by_one_per_s'] / 1e6:.2f} | {case['compute_per_s'] / 1e6:.1f} | "
                     f"{case['numerics_over_shipped']:.2f}x | {case['compute_over_numpy']:.1f}x |")
    return lines + [""]

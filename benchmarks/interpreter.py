"""Triton's interpreter as compute mode runs it: kernels' throughput against NumPy, and what the device numerics cost.

``--only interpreter``. Each variant runs in a fresh interpreter with ``TRITON_INTERPRET=1``:
``shipped`` (the interpreter as triton-ascend ships it, with only the bridge without which its loops
stop on NumPy 2.4) and ``compute`` (with compute mode's
changes: device conversions and NaN rules, bfloat16 arithmetic in float32, the device's
reductions). Each times the same kernels side by side: a float32 pointwise kernel, a float32 ->
bfloat16 pointwise kernel (where the device's rounding replaces the shipped truncation), a
persistent row reduction and a looped one (``tl.range`` over the row), each launched over a grid
of blocks as Inductor launches them. Beside each, NumPy's one vectorised evaluation of the same
expression over the whole array: the limit an interpreter of the same data can approach. Figures
are elements per second (median of the repeats), and the ratio to NumPy's.
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.common import REPO, log

RESULT = "interpreter"
#: the compute mode's changes must not make a kernel slower than this, against the interpreter as shipped
TARGETS = {"compute_over_shipped_max": ("<=", 1.5)}

SCRIPT = r"""
import json, os, statistics, sys, time
os.environ["TRITON_INTERPRET"] = "1"
import numpy as np
import torch
import triton
import triton.language as tl

variant, size, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from pytest_npu_lazy.cann.compute import interpreter
if variant == "compute":
    interpreter.install_language_shims()
    interpreter.install_interpreter_shims()
else:  # as shipped, but for the one bridge without which no loop over a reduction runs on NumPy 2.4
    import triton.runtime.interpreter as shipped
    interpreter._index_one_element_arrays(shipped)


@triton.jit
def pointwise(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask)
    y = tl.load(y_ptr + offsets, mask)
    tl.store(out_ptr + offsets, x * y + 1.0, mask)


@triton.jit
def downcast(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, (tl.load(x_ptr + offsets, mask) * 2.0).to(tl.bfloat16), mask)


@triton.jit
def row_sum(x_ptr, out_ptr, columns, ROWS: tl.constexpr, COLUMNS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, COLUMNS)[None, :]
    x = tl.load(x_ptr + rows * columns + cols, cols < columns)
    tl.store(out_ptr + rows, tl.sum(x, 1)[:, None])


@triton.jit
def looped_row_sum(x_ptr, out_ptr, columns, ROWS: tl.constexpr, CHUNK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    total = tl.zeros([ROWS, CHUNK], tl.float32)
    for start in tl.range(0, columns, CHUNK):
        cols = start + tl.arange(0, CHUNK)[None, :]
        total += tl.load(x_ptr + rows * columns + cols, cols < columns, other=0.0)
    tl.store(out_ptr + rows, tl.sum(total, 1)[:, None])


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
    grid = (triton.cdiv(size, block),)
    rows_grid = (matrix.shape[0] // rows_per_program,)
    xn, yn, mn = x.numpy(), y.numpy(), matrix.numpy()
    cases = {
        "pointwise float32 (x*y+1)": (lambda: pointwise[grid](x, y, out, size, BLOCK=block), lambda: xn * yn + 1.0),
        "pointwise float32 -> bfloat16": (lambda: downcast[grid](x, half, size, BLOCK=block),
                                           lambda: (xn * 2.0).astype(np.float32)),
        "row sum, persistent (16 rows a program)": (
            lambda: row_sum[rows_grid](matrix, sums, columns, ROWS=rows_per_program, COLUMNS=columns),
            lambda: mn.sum(axis=1)),
        "row sum, looped (chunks of 128)": (
            lambda: looped_row_sum[rows_grid](matrix, sums, columns, ROWS=rows_per_program, CHUNK=128),
            lambda: mn.sum(axis=1)),
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
    done = subprocess.run([sys.executable, "-c", SCRIPT, variant, str(size), str(repeats)], env=environment,
                          capture_output=True, text=True, cwd=REPO)
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        return f"the {variant} interpreter script failed: {done.stderr[-1500:]}"
    return json.loads(line[len("RESULT "):])


def bench(args, env: dict[str, str]) -> dict:
    size = 1 << 14 if args.quick else 1 << 20
    repeats = 1 if args.quick else 3
    runs = {}
    for variant in ("shipped", "compute"):
        got = _run(variant, size, repeats, env)
        if isinstance(got, str):
            return {"error": got}
        runs[variant] = got
    cases = {}
    for name in runs["compute"]:
        shipped, compute = runs["shipped"][name], runs["compute"][name]
        cases[name] = {
            "elements": compute["elements"],
            "numpy_per_s": compute["elements"] / compute["numpy_s"],
            "shipped_per_s": shipped["elements"] / shipped["kernel_s"],
            "compute_per_s": compute["elements"] / compute["kernel_s"],
            "compute_over_shipped": compute["kernel_s"] / shipped["kernel_s"],
            "numpy_over_compute": compute["numpy_s"] / compute["kernel_s"],
        }
        log(f"interpreter: {name}: {cases[name]['compute_per_s'] / 1e6:.1f} M elements/s under compute mode "
            f"({cases[name]['compute_over_shipped']:.2f}x the shipped interpreter's time), NumPy "
            f"{cases[name]['numpy_per_s'] / 1e6:.0f} M/s")
    return {"size": size, "repeats": repeats, "cases": cases}


def figures(result: dict) -> dict:
    cases = result.get("cases") or {}
    return {"compute_over_shipped_max": max((c["compute_over_shipped"] for c in cases.values()), default=None)}


def markdown(result: dict) -> list[str]:
    if "cases" not in result:
        return [f"Interpreter: {result.get('error', 'not measured')}", ""]
    lines = ["### Triton's interpreter under compute mode", "",
             f"{result['size']:,} float32 elements, median of {result['repeats']}; each kernel launched over a grid "
             "of 1024-element blocks (reductions: 16 rows of 1024 a program) as Inductor launches them.", "",
             "| kernel | NumPy, one vectorised pass (M elements/s) | interpreter as shipped (M/s) | compute mode (M/s) "
             "| compute / shipped time | NumPy / compute time |", "|---|---:|---:|---:|---:|---:|"]
    for name, case in result["cases"].items():
        lines.append(f"| {name} | {case['numpy_per_s'] / 1e6:.0f} | {case['shipped_per_s'] / 1e6:.2f} | "
                     f"{case['compute_per_s'] / 1e6:.2f} | {case['compute_over_shipped']:.2f}x | "
                     f"{case['numpy_over_compute']:.4f} |")
    return lines + [""]

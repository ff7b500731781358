"""The TTIR check of torch_npu's index codegen under compute mode (pytest_npu_lazy/cann/compute/index_codegen.py).

Under ``TRITON_INTERPRET=1`` a kernel is an interpreted function and the interpreter rewrites ``triton.language``'s
builtins for good at its first launch; torch_npu's check compiles the kernel with Triton's frontend. These tests
run the frontend as the bridge does, in a fresh interpreter, on a kernel that calls a jit helper and ``tl.sum``
(itself an interpreted jit function) after a launch has patched the language: the TTIR must come out, and the
interpreter must compute as before afterwards. A kernel the frontend refuses must still fail the check, and which
codegen wrote a kernel is read from its ``inductor_meta``. torch_npu's own kernels under the check are
test/npu_kernels/test_chip_paths.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHECK = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # CPU tensors: no torch_npu
sys.path.insert(0, {root!r})
from pytest_npu_lazy.cann.compute import index_codegen, interpreter
import torch
import triton, triton.language as tl
index_codegen.remember_language()  # as compute mode does once triton has loaded
interpreter.install_interpreter_shims()
from triton.compiler.compiler import ASTSource, make_backend
from triton.backends.compiler import GPUTarget
from triton.compiler.code_generator import ast_to_ttir
from triton._C.libtriton import ir


@triton.jit
def twice(x):
    return tl.where(x >= 0, x * 2, x)  # a builtin in the helper: the interpreter's own, if it were called as one


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, twice(x) + tl.sum(x, 0), mask=mask)


@triton.jit
def refused(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK) + tl.arange(0, 2 * BLOCK)  # shapes that do not broadcast: the frontend refuses
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


def ttir(fn):
    source = ASTSource(fn, {{"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}}, {{"BLOCK": 4}})
    backend = make_backend(GPUTarget("npu", "Ascend910B3", 32))
    options = backend.parse_options({{"num_warps": 1, "num_stages": 1}})
    context = ir.context()
    ir.load_dialects(context)
    return str(ast_to_ttir(fn, source, context, options, {{}}, {{}}))


x, out = torch.arange(8.), torch.zeros(8)
kernel[(2,)](x, out, 8, BLOCK=4)  # the interpreter patches triton.language now
answer = {{"first": out.tolist(), "patched": not tl.core.is_builtin(tl.program_id)}}
with index_codegen.compiler_language():
    answer["pristine_inside"] = tl.core.is_builtin(tl.program_id)
    text = ttir(index_codegen.compiler_view(kernel))
    answer["ttir"] = ["tt.func" in text, "tt.call @twice" in text, "tt.reduce" in text, "tt.store" in text]
    try:
        ttir(index_codegen.compiler_view(refused))
        answer["refused"] = None
    except Exception as error:
        answer["refused"] = type(error).__name__ + ": " + str(error)[-200:]
answer["patched_after"] = not tl.core.is_builtin(tl.program_id)
try:
    ttir(triton.runtime.jit.JITFunction(kernel.fn))  # no view, no pristine language: what the bridge is for
    answer["without"] = None
except Exception as error:
    answer["without"] = type(error).__name__
out.zero_()
kernel[(2,)](x, out, 8, BLOCK=4)
answer["second"] = out.tolist()
print(json.dumps(answer))
"""


def test_the_frontend_compiles_the_compiler_view_of_an_interpreted_kernel_and_the_interpreter_still_runs(tmp_path):
    from cann_support import run_python

    pytest.importorskip("triton")
    script = tmp_path / "check_kernel.py"  # in a file: the frontend reads a kernel's source, as torch_npu's are read
    script.write_text(CHECK.format(root=str(Path(__file__).resolve().parents[2])))
    got = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    expected = [2 * i + sum(range(4)) for i in range(4)] + [2 * i + sum(range(4, 8)) for i in range(4, 8)]
    assert got["first"] == expected and got["second"] == expected, got
    assert got["patched"] and got["pristine_inside"] and got["patched_after"], got
    assert got["ttir"] == [True, True, True, True], got  # the helper and tl.sum came through as jit functions
    assert got["refused"] and "CompilationError" in got["refused"], got
    assert got["without"], "the frontend compiled an interpreted kernel with no view: the bridge would be needless"


PROBED = CHECK.split("x, out = torch.arange(8.)")[0] + """
from pytest_npu_lazy.mutate import trace
from pytest_npu_lazy.mutate.trace import hit as __npu_lazy_mutate_hit__


@triton.jit
def probed_helper(x):
    __npu_lazy_mutate_hit__("check_kernel:probed_helper")  # what the mutation pass's coverage run writes first
    return x + 1


@triton.jit
def probed(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, probed_helper(tl.load(x_ptr + offsets, mask=offsets < n)), mask=offsets < n)


x, out = torch.arange(8.), torch.zeros(8)
probed[(2,)](x, out, 8, BLOCK=4)
answer = {{"out": out.tolist(), "hit": any(key[0] == "check_kernel:probed_helper" for key in trace._written)}}
with index_codegen.compiler_language():
    try:
        answer["ttir"] = "tt.call @probed_helper" in ttir(index_codegen.compiler_view(probed))
    except Exception as error:
        answer["ttir"] = type(error).__name__ + ": " + str(error)[-600:]
    index_codegen._PROBE_MODULE = "not.the.probe"  # the view as it was before it knew the probe
    index_codegen._VIEWS.clear()
    try:
        ttir(index_codegen.compiler_view(probed))
        answer["unknown_probe"] = None
    except Exception as error:
        answer["unknown_probe"] = type(error).__name__ + ": " + str(error)
print(json.dumps(answer))
"""


def test_a_helper_the_mutation_pass_probed_still_compiles_and_its_probe_still_fires(tmp_path):
    """The mutation pass's coverage run puts a probe call first in each ``@triton.jit`` helper of torch_npu's it
    instruments. The interpreter runs it (the hit is recorded); the compiler's view must see a probe that does
    nothing, or torch_npu's TTIR check fails on every kernel calling the helper and torch_npu writes those kernels
    with its no-linear codegen: the coverage run would then judge other kernels than the plain run's."""
    from cann_support import run_python

    pytest.importorskip("triton")
    script = tmp_path / "check_kernel.py"
    script.write_text(PROBED.format(root=str(Path(__file__).resolve().parents[2])))
    got = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    assert got["out"] == [float(i + 1) for i in range(8)] and got["hit"], got
    assert got["ttir"] is True, got["ttir"]
    assert got["unknown_probe"] and "Cannot access global variable" in got["unknown_probe"], got["unknown_probe"]


def test_which_codegen_wrote_a_kernel_is_read_from_its_inductor_meta():
    from pytest_npu_lazy.cann.compute.index_codegen import INDEX_CODEGEN, NO_LINEAR_CODEGEN, written_by

    assert written_by({"requires_no_linear_block_remap": True, "split_axis": [0]}) == NO_LINEAR_CODEGEN
    assert written_by({"runtime_block_arg_names": (), "split_axis": [0]}) == INDEX_CODEGEN
    assert written_by({"runtime_block_arg_names": ("Y0BLOCK",)}) == INDEX_CODEGEN
    assert written_by({"kernel_name": "triton_poi_add_0"}) is None  # not torch_npu's: no claim


def test_the_header_names_the_index_codegen_bridges_before_and_once_they_stand():
    """Before anything loads (a fresh interpreter), compute mode's header names the bridges planned, the index
    codegen's among them, and none stands yet; test_chip_paths.py's index-codegen test checks them in force."""
    from cann_support import run_python

    got = run_python(
        "import json, sys; sys.path.insert(0, %r)\n"
        "from pytest_npu_lazy.cann.compute import describe, index_codegen\n"
        "print(json.dumps({'planned': describe(), 'names': index_codegen.PLANNED,"
        " 'in_force': index_codegen.in_force()}))" % str(Path(__file__).resolve().parents[2]))
    assert got["names"] and all(name in got["planned"] for name in got["names"]), got["planned"]
    assert got["in_force"] == {}, "a bridge stood before torch_npu's autotuner loaded"

"""Pointwise, broadcast, view and reduction operators: compiled on the NPU equals eager on the NPU.

Written as torch_npu writes its Inductor op tests (inputs made on the NPU, eager computed there,
``torch.compile(backend="inductor")`` of the same function, the two compared), one test per
operator and dtype. Under ``--npu-lazy-cann=compute`` eager runs ATen's CPU kernels on the
device's host memory and the compiled call runs the Triton kernels torch_npu's NPU codegen
wrote, in Triton's interpreter; the report lists them per test (``computed``). What the
interpreter or the emulation cannot run, or where torch_npu's compiled result differs from
eager for a reason of its own, is a strict xfail naming the reason (``KNOWN``): where it equals
eager after all, the test fails, saying so. docs/npu-kernels.md is the table.
"""

from __future__ import annotations

import pytest
import findings
from ops import BROADCAST, FLOATS, INT_REDUCTIONS, POINTWISE, POSITIVE, REDUCTIONS, VIEWS
from testutils import MARKS, SHARED, SHAPE_OF, assert_equal_to_eager, compile_and_run, computed_by_the_compiled_call, generate_tensor

pytestmark = MARKS

#: (test name, dtype) -> the finding that explains why the compiled result cannot equal eager here, read from the
#: installed sources where it is torch_npu's doing (findings.py); each one a finding in docs/npu-kernels.md
KNOWN: dict[tuple[str, str], findings.Finding] = findings.known()


def _compare(key: str, dtype: str, op, *inputs, **options) -> None:
    """Compiled against eager; for a known difference a strict xfail, taken only where the difference is exactly
    the documented one (any other fails), and a failure where it equals eager now."""
    finding = KNOWN.get((key, dtype))
    compiled, eager = compile_and_run(op, *inputs)
    if finding is None:
        assert_equal_to_eager(compiled, eager, **options)
        return
    try:
        assert_equal_to_eager(compiled, eager, **options)
    except AssertionError:
        finding.account(compiled, eager, inputs, op)  # BeyondTheFinding: a failure, not the xfail
        pytest.xfail(finding.reason)
    pytest.fail(f"expected the compiled result to differ from eager ({finding.reason}), but it equals eager now: "
                "take it out of findings.known() and docs/npu-kernels.md", pytrace=False)


@SHARED
@pytest.mark.parametrize("name,dtype", [(name, dtype) for name, (_, dtypes, _) in POINTWISE.items()
                                        for dtype in dtypes])
def test_pointwise(name, dtype):
    op, _, arity = POINTWISE[name]
    inputs = [generate_tensor(SHAPE_OF[dtype], dtype, positive=name in POSITIVE) for _ in range(arity)]
    _compare(f"pointwise:{name}", dtype, op, *inputs)


@SHARED
@pytest.mark.parametrize("dtype", FLOATS + ("int64",))
@pytest.mark.parametrize("name", list(BROADCAST))
def test_broadcast(name, dtype):
    op, other_shape = BROADCAST[name]
    shape = SHAPE_OF[dtype]
    _compare(f"broadcast:{name}", dtype, op, generate_tensor(shape, dtype), generate_tensor(other_shape(shape), dtype))


@SHARED
@pytest.mark.parametrize("dtype", FLOATS + ("int64",))
@pytest.mark.parametrize("name", list(VIEWS))
def test_view(name, dtype):
    _compare(f"view:{name}", dtype, VIEWS[name], generate_tensor(SHAPE_OF[dtype], dtype))


@SHARED
@pytest.mark.parametrize("name,dtype", [(name, dtype) for name in REDUCTIONS for dtype in FLOATS]
                         + [(name, "int64") for name in INT_REDUCTIONS])
def test_reduction(name, dtype):
    _compare(f"reduction:{name}", dtype, REDUCTIONS[name], generate_tensor(SHAPE_OF[dtype], dtype))


@SHARED
@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("name", ["amax", "amin", "argmax", "argmin", "max_dim", "min_dim"])
def test_reduction_with_nan_and_ties(name, layout):
    """Inductor's rules where NumPy's fast path stands in for the interpreter: NaN wins, ties go to the lowest index.
    Each layout is a test of its own: a known difference ends its test (a strict xfail) at the first comparison."""
    import torch

    x = torch.tensor([[1., 3., 3., 0.], [float("nan"), 2., float("nan"), 2.], [5., 5., 5., 5.]]).repeat(8, 4)
    x = x if layout == "rows" else x.t().contiguous()
    _compare(f"nan_and_ties:{name}", "float32", REDUCTIONS[name], x.npu(), equal_nan=True)


@SHARED
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_cumsum_of_a_scalar(dtype):
    """A 0-dim cumsum: torch_npu's lowering copies it (in int32 for integers, as for every integer cumsum)."""
    import torch

    x = torch.tensor(7, dtype=getattr(torch, dtype)).npu()
    _compare("cumsum_scalar", dtype, lambda t: t.cumsum(0), x)


@SHARED
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_an_integer_cumsum_with_an_explicit_dtype_keeps_it(dtype):
    """torch_npu's cumsum lowering makes integer and bool cumsums int32 off the Ascend 950 only when no dtype is
    asked for (findings.py): an explicit int64 stays int64, as eager."""
    import torch

    # assert_close compares the dtypes first: an int32 result fails here
    _compare("cumsum_int64", dtype, lambda t: t.cumsum(-1, dtype=torch.int64), generate_tensor(SHAPE_OF[dtype], dtype))


@SHARED
def test_cumsum_of_booleans():
    _compare("cumsum_bool", "bool", lambda t: t.cumsum(-1), generate_tensor(SHAPE_OF["bool"], "bool"))


#: torch_npu's own op tests compare with atol=rtol=1e-3 (its test/_inductor/testutils.py): narrower than one
#: bfloat16 step, so a kernel that rounds differently from eager fails them
TORCH_NPU_TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}


@SHARED
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "exp", "expm1", "sigmoid", "broadcast_add"])
def test_bfloat16_operators_with_torch_npus_tolerance(name):
    """A single bfloat16 operator rounds once in eager and in the kernel: the two agree within torch_npu's own
    tolerance (the interpreter as shipped truncated the kernel's float32 -> bfloat16: 26 % of a broadcast add's
    elements one step off)."""
    if name == "broadcast_add":
        shape = SHAPE_OF["bfloat16"]
        inputs = (generate_tensor(shape, "bfloat16"), generate_tensor(shape[-1:], "bfloat16"))
        op = POINTWISE["add"][0]
    else:
        op, _, arity = POINTWISE[name]
        inputs = [generate_tensor(SHAPE_OF["bfloat16"], "bfloat16", positive=name in POSITIVE) for _ in range(arity)]
    _compare(f"bfloat16_at_1e-3:{name}", "bfloat16", op, *inputs, **TORCH_NPU_TOLERANCE)


#: every branch of torch_npu's pow lowering (torch_npu/_inductor/lowering.py, ``pow``): an integral float exponent
#: becomes an int, 0.5 is sqrt, 1 a clone, small ints are unrolled (pow_recursive), large ones and tensor exponents
#: go to the native pow, a scalar base 2 is exp2 and 1 a full_like; integer bases unroll or fall back to ATen
#: each of torch_npu's pow lowering's branches (torch_npu/_inductor/lowering.py, ``pow``): the operation, the dtype,
#: and what must compute the compiled result: a Triton kernel (the lowering embeds the exponent or calls ops.pow) or
#: the host's ATen pow (the lowering falls back for integer and float64 powers it cannot embed)
POW_CASES = {
    "half": (lambda x: x ** 0.5, "float32", "kernel"),
    "integral_float": (lambda x: x ** 2.0, "float32", "kernel"),
    "one": (lambda x: x ** 1, "float32", "kernel"),
    "small_int": (lambda x: x ** 3, "float32", "kernel"),
    "negative_int": (lambda x: x ** -2, "float32", "kernel"),
    "large_int": (lambda x: x ** 40, "float32", "kernel"),
    "fractional": (lambda x: x ** 2.5, "float32", "kernel"),
    "one_and_a_half": (lambda x: x ** 1.5, "float32", "kernel"),  # beside 0.5: the sqrt branch must not take it
    "tensor_exponent": (lambda x: x ** (x * 0.5), "float32", "kernel"),
    "base_two": (lambda x: 2 ** x, "float32", "kernel"),
    "base_three": (lambda x: 3 ** x, "float32", "kernel"),
    "base_one": (lambda x: 1 ** x, "float32", "kernel"),
    "integer_small": (lambda x: x ** 3, "int32", "kernel"),
    "integer_large": (lambda x: x ** 40, "int64", "kernel"),
    "half_bf16": (lambda x: x ** 0.5, "bfloat16", "kernel"),
    "integer_tensor_exponent": (lambda x: x ** (x % 3), "int64", "host"),
    "integer_base_two": (lambda x: 2 ** x, "int64", "host"),
    "float64_fractional": (lambda x: x ** 2.5, "float64", "host"),
    "float64_base_three": (lambda x: 3 ** x, "float64", "host"),
}
# (a float64 power the lowering embeds, or an exponent computed in float64, makes a float64 kernel, which
# triton-ascend refuses: "[fp8, fp64] is unsupported on Ascend", on a device as here)


@SHARED
@pytest.mark.parametrize("case", list(POW_CASES))
def test_pow_branches(case):
    """Each branch's result equals eager, and the right thing computed it: a Triton kernel where torch_npu's lowering
    embeds the exponent or calls ops.pow, the host's ATen pow where it falls back (a routing regression that
    still computes the right value, say integers sent to ops.pow or floats sent to the fallback, fails here)."""
    op, dtype, path = POW_CASES[case]
    positive = dtype in FLOATS + ("float64",)
    shape = SHAPE_OF.get(dtype, SHAPE_OF["float32"])
    x = generate_tensor(shape, dtype, positive=positive, low=0 if not positive else None, high=4 if not positive else None)
    _compare(f"pow:{case}", dtype, op, x)
    kernels, host = computed_by_the_compiled_call()
    if not kernels and not host:
        return  # a real NPU: nothing is written to the ledger, the values were compared above
    host_pow = [name for name in host if "pow" in name]
    if path == "kernel":
        assert kernels and not host_pow, (f"pow:{case}: expected a Triton kernel to compute it, got kernels {kernels}, "
                                          f"host ATen {host_pow}")
    else:
        assert host_pow, f"pow:{case}: expected the host's ATen pow (torch_npu's fallback), got kernels {kernels}"


WELFORD = {
    "var_mean": lambda x: _torch().var_mean(x, dim=-1),
    "var": lambda x: x.var(dim=-1),
    "layer_norm": lambda x: _torch().nn.functional.layer_norm(x, x.shape[-1:]),
    "batch_var": lambda x: x.var(dim=0),
}


def _torch():
    import torch

    return torch


#: shapes beside the op tests' own (whose 32-element rows fit one tile): a reduction long enough for the index
#: codegen's loop over it, after which a Welford epilogue (layer_norm's normalisation) must load its values again;
#: and a layer_norm over a transposed input, whose reduction runs along the strided axis
WELFORD_SHAPES = {"rows": SHAPE_OF["float32"], "long_rows": (4, 6000), "transposed": (48, 640)}


@pytest.mark.parametrize("shape", list(WELFORD_SHAPES))
@pytest.mark.parametrize("name", list(WELFORD))
def test_welford_reductions_behind_torch_npus_switch(name, shape, monkeypatch):
    """TORCHINDUCTOR_ENABLE_WELFORD=1 selects torch_npu's vectorised Welford reductions (its lowering and codegen);
    read when torch_npu._inductor's config first loads, which is the first compiled call here."""
    import sys

    assert "torch_npu._inductor.config" not in sys.modules, "the switch must be set before torch_npu reads it"
    monkeypatch.setenv("TORCHINDUCTOR_ENABLE_WELFORD", "1")
    x = generate_tensor(WELFORD_SHAPES[shape], "float32")
    _compare(f"welford:{name}", "float32", WELFORD[name], x.t() if shape == "transposed" else x)
    from torch_npu._inductor import config as npu_config

    assert npu_config.enable_welford, "the Welford switch did not reach torch_npu's config"


#: the variance lowerings' edges (torch_npu's var_mean_sum_ and var_mean_welford_): aten's own overloads with
#: the correction left out (None: torch_npu's lowering supplies 1), every dimension reduced (dim None), a
#: reduced dimension of one element or a correction of N (N - correction = 0: NaN, as eager), the population
#: variance (correction 0)
VARIANCE_EDGES = {
    "var_default_correction": (lambda x: _torch().ops.aten.var.correction(x, [-1]), (16, 33)),
    "var_mean_default_correction": (lambda x: _torch().ops.aten.var_mean.correction(x, [-1]), (16, 33)),
    "var_all_dims": (lambda x: x.var(), (16, 33)),
    "var_mean_all_dims": (lambda x: _torch().var_mean(x), (16, 33)),
    "var_one_element": (lambda x: x.var(dim=-1), (16, 1)),
    "var_mean_one_element": (lambda x: _torch().var_mean(x, dim=-1), (16, 1)),
    "var_mean_population": (lambda x: _torch().var_mean(x, dim=-1, correction=0), (16, 33)),
    # N - correction = 0 over a reduction long enough for Welford (one element takes the two-step path)
    "var_mean_correction_of_n": (lambda x: _torch().var_mean(x, dim=-1, correction=x.shape[-1]), (16, 33)),
}


@pytest.mark.filterwarnings("ignore:var.*degrees of freedom is <= 0:UserWarning")  # eager's, for one element
@pytest.mark.parametrize("welford", [False, True], ids=["two_step", "welford"])
@pytest.mark.parametrize("case", list(VARIANCE_EDGES))
def test_variance_edges(case, welford, monkeypatch):
    """Each edge both ways torch_npu lowers a variance: its two-step sums, and its Welford reductions behind
    TORCHINDUCTOR_ENABLE_WELFORD=1 (var_mean only: a standalone var never takes them)."""
    if welford:
        monkeypatch.setenv("TORCHINDUCTOR_ENABLE_WELFORD", "1")
    op, shape = VARIANCE_EDGES[case]
    x = generate_tensor(shape, "float32")
    if not (welford and case == "var_mean_all_dims"):
        _compare(f"variance:{case}", "float32", op, x, equal_nan=True)
        return
    _expect_welford_recursion(f"variance:{case}", op, x)


def _expect_welford_recursion(name: str, op, x) -> None:
    """The finding below, and only it: the compile fails with RecursionError, else the test fails."""
    from torch._inductor.exc import InductorError

    try:
        _compare(name, str(x.dtype).removeprefix("torch."), op, x, equal_nan=True)
    except InductorError as error:
        if "RecursionError" not in str(error):
            raise
        pytest.xfail(WELFORD_SPLITS_WITHOUT_END)
    pytest.fail(f"expected the compile to fail ({WELFORD_SPLITS_WITHOUT_END}), but it compiles now and equals eager: "
                "take this xfail out", pytrace=False)


#: a finding, expected the same on a device but not checked on one: the split is decided while compiling, from the
#: device's core count, which the emulated NPU gives as an Ascend 910B3 has
WELFORD_SPLITS_WITHOUT_END = (
    "torch_npu's Welford lowering (TORCHINDUCTOR_ENABLE_WELFORD=1) of a var_mean with one output element (over every "
    "element, or over the last dimension of one row: a layer norm of a single row too) never ends compiling: "
    "Inductor's WelfordReduction.create splits the reduction in two layers and the second layer splits again, "
    "without end (RecursionError in create_multilayer)")


@pytest.mark.parametrize("case", ["var_mean_of_one_row", "layer_norm_of_one_row"])
def test_a_welford_reduction_with_one_output_never_ends_compiling(case, monkeypatch):
    """The same finding where users meet it: one row (a batch of one), with torch_npu's Welford switch on."""
    import torch

    monkeypatch.setenv("TORCHINDUCTOR_ENABLE_WELFORD", "1")
    op = {"var_mean_of_one_row": lambda t: torch.var_mean(t, dim=-1),
          "layer_norm_of_one_row": lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:])}[case]
    _expect_welford_recursion(case, op, generate_tensor((1, 64), "float32"))


def test_welford_variance_with_dynamic_shapes(monkeypatch):
    """A reduction length known only at run time: the Welford scale reads it as an index expression."""
    monkeypatch.setenv("TORCHINDUCTOR_ENABLE_WELFORD", "1")
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: torch.var_mean(x, dim=-1), backend="inductor", dynamic=True)
    for length in (33, 65):
        x = generate_tensor((16, length), "float32")
        assert_equal_to_eager(compiled(x), torch.var_mean(x, dim=-1))


def test_torch_npus_variance_lowerings_are_the_ones_registered():
    """torch_npu registers its own var and var_mean lowerings over Inductor's: a compile that took Inductor's
    would compute the same values, so the registration itself is what is checked."""
    import torch
    from torch._inductor.lowering import lowerings

    x = generate_tensor((16, 33), "float32")
    compile_and_run(lambda t: torch.var_mean(t, dim=-1)[0] + t.var(dim=-1), x)  # torch_npu's backend is loaded
    aten = torch.ops.aten
    for overload in (aten.var_mean.correction, aten.var.correction):
        lowering = lowerings[overload]
        assert lowering.__module__ == "torch_npu._inductor.lowering", (overload, lowering.__module__)


def _kernel_lines(fn, x, welford: bool, monkeypatch) -> list[str]:
    """The Triton operations (``tl.`` and ``triton_helpers.`` lines) of ``fn``'s compiled kernels, with torch_npu's Welford switch as given
    (its config attribute: the lowering reads it at each compile, the variable only at import)."""
    import torch
    from torch._inductor.utils import run_and_get_code
    from torch_npu._inductor import config

    monkeypatch.setattr(config, "enable_welford", welford)
    monkeypatch.setattr(torch._inductor.config, "force_disable_caches", True)  # the graph cache's key omits the switch
    torch._dynamo.reset()
    compiled, codes = run_and_get_code(torch.compile(fn, backend="inductor"), x)
    assert_equal_to_eager(compiled, fn(x))
    return [line.strip() for code in codes for line in code.splitlines() if "tl." in line or "triton_helpers." in line]


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled by torch.compiler.config.force_disable_caches")
@pytest.mark.parametrize("shape", [(16, 4), (2, 4), (4, 8192)])
def test_welford_switch_takes_the_two_step_sums_for_short_reductions(shape, monkeypatch):
    """With torch_npu's Welford switch on, a var_mean shorter than Inductor's unroll threshold (8 elements) with more
    than one output row still takes the two-step sums (``use_two_step_variance``): both lowerings compute the same
    values, so the kernel is what tells them apart. A long, looped one takes Welford's online update."""
    import torch

    fn = lambda t: torch.var_mean(t, dim=-1)  # noqa: E731
    x = generate_tensor(shape, "float32")
    welford, two_step = _kernel_lines(fn, x, True, monkeypatch), _kernel_lines(fn, x, False, monkeypatch)
    if shape[-1] < torch._inductor.config.unroll_reductions_threshold:
        assert welford == two_step, "a short var_mean took Welford's lowering with the switch on"
    else:
        assert any("welford" in line for line in welford) and not any("welford" in line for line in two_step), (
            [line for line in welford if "welford" in line], [line for line in two_step if "welford" in line])

"""Edges of torch_npu's own lowerings (``torch_npu/_inductor/lowering.py``) that the op tests do not reach.

Each test here was written for mutants of those lowerings that survived the op tests (docs/mutation-npu.md): a
registration nothing checked, a cumsum of one dimension or of a scalar, the AOTInductor fallback table torch_npu
extends, a conversion to complex that does not compile, the formula pow's lowering writes for each exponent, and a
float64 mean triton-ascend refuses. Values are compared with eager's as in the op tests.
"""

from __future__ import annotations

import pytest
from testutils import MARKS, assert_equal_to_eager, compile_and_compare, generate_tensor

pytestmark = MARKS


def _aten():
    import torch

    return torch.ops.aten


#: the operators torch_npu lowers itself (its LOWERING_OVERRIDE_OP and the registrations beside it), by overload
REGISTERED = {
    "mean": lambda: _aten().mean.default,
    "mean_dim": lambda: _aten().mean.dim,
    "cumsum": lambda: _aten().cumsum.default,
    "pow_tensor_scalar": lambda: _aten().pow.Tensor_Scalar,
    "pow_tensor_tensor": lambda: _aten().pow.Tensor_Tensor,
    "cat": lambda: _aten().cat.default,
    "native_layer_norm": lambda: _aten().native_layer_norm.default,
    "var_mean": lambda: _aten().var_mean.correction,
    "var": lambda: _aten().var.correction,
    "convert_element_type": lambda: __import__("torch").ops.prims.convert_element_type.default,
}


@pytest.mark.parametrize("name", list(REGISTERED))
def test_torch_npus_lowering_is_the_one_registered(name):
    """Where torch_npu's lowering and Inductor's compute the same values (a mean, a variance, a layer norm), a compile
    that took Inductor's would pass every value test: the registration itself is what is checked, once torch_npu's
    backend has loaded (a first compile on the NPU)."""
    from torch._inductor.lowering import lowerings

    compile_and_compare(lambda t: t.sum(-1), generate_tensor((4, 8), "float32"))
    overload = REGISTERED[name]()
    lowering = lowerings[overload]
    assert lowering.__module__ == "torch_npu._inductor.lowering", (
        f"{overload} is lowered by {lowering.__module__}.{lowering.__qualname__}, not torch_npu's")


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_cumsum_over_one_dimension(dtype):
    """torch_npu's cumsum lowering takes a 0-d input apart from the rest: a 1-d input is the ordinary case (its
    ATen fallback), never the 0-d copy. Integers accumulate in int32 off the Ascend 950 (findings.py), so the values
    are compared in int32 there, as test_ops compares them."""
    x = generate_tensor((37,), dtype)
    if dtype == "int32":
        import torch

        compile_and_compare(lambda t: t.cumsum(0).to(torch.int32), x)
    else:
        compile_and_compare(lambda t: t.cumsum(0), x)


@pytest.mark.parametrize("dim", [0, -1])
def test_cumsum_of_a_scalar(dim):
    """A 0-d cumsum is a copy in torch_npu's lowering, over dim 0 or -1 both (eager accepts both)."""
    compile_and_compare(lambda t: t.cumsum(dim), generate_tensor((), "float32"))


def test_the_aoti_fallback_table_holds_torch_npus_operators():
    """torch_npu merges its own fallback operators into AOTInductor's C-shim table (torchgen.aoti.fallback_ops) and
    takes out those the NPU does not support, when its lowerings register: an AOTInductor build for the NPU reads
    that table."""
    import torchgen.aoti.fallback_ops as fallback_ops
    from torchnpugen.aoti.fallback_ops import inductor_fallback_ops_npu, inductor_fallback_ops_npu_not_support

    compile_and_compare(lambda t: t.sum(-1), generate_tensor((4, 8), "float32"))
    table = fallback_ops.inductor_fallback_ops
    missing = sorted(set(inductor_fallback_ops_npu) - set(inductor_fallback_ops_npu_not_support) - set(table))
    unsupported = sorted(set(inductor_fallback_ops_npu_not_support) & set(table))
    assert not missing, f"torch_npu's fallback operators are not in AOTInductor's table: {missing[:5]}"
    assert not unsupported, f"operators the NPU does not support are in AOTInductor's table: {unsupported[:5]}"


def test_a_scalar_converts_to_complex():
    """torch_npu's conversion to a complex dtype: a 0-d tensor takes ATen's convert_element_type (its fallback)."""
    import torch

    compile_and_compare(lambda t: t.to(torch.complex64), generate_tensor((), "float32"))


def test_a_tensor_does_not_compile_into_complex():
    """A finding, pinned: torch_npu converts a tensor of one or more dimensions to a complex dtype by copying it into
    ``full_like(x, 0, dtype=complex)``, and Inductor cannot hold a complex constant (its index propagation asks the
    constant ``is_integer``): the compile fails before any kernel runs, on a device as here. Strict: where it
    compiles, this fails, and the case belongs with test_a_scalar_converts_to_complex."""
    import torch

    x = generate_tensor((4, 5), "float32")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="'complex' object has no attribute 'is_integer'"):
        torch.compile(lambda t: t.to(torch.complex64), backend="inductor")(x)
    assert_equal_to_eager(x.to(torch.complex64).real, x)  # eager converts it


#: pow's cases by the formula torch_npu's lowering writes into the kernel: (function, what its kernel must call,
#: what it must not): an integral float exponent multiplied out, 0.5 as a square root, |b| = 32 (the edge of the
#: exponents it multiplies out) as a call of pow, a base of 2 as exp2
POW_FORMULAS = {
    "integral_float": (lambda x: x ** 3.0, None, "pow("),
    "half": (lambda x: x ** 0.5, "sqrt", "pow("),
    "thirty_two": (lambda x: x ** 32, "pow(", None),
    "minus_thirty_two": (lambda x: x ** -32, "pow(", None),
    "base_two": (lambda x: 2 ** x, "exp2(", "pow("),
}


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled by torch.compiler.config.force_disable_caches")
@pytest.mark.parametrize("case", list(POW_FORMULAS))
def test_pow_writes_the_formula_its_lowering_chooses(case, monkeypatch):
    """Where two formulas give values within a rounding of each other (x ** 3.0 multiplied out or by pow; sqrt or
    pow(x, 0.5); exp2 or pow(2, x)), a value test cannot tell which one torch_npu's lowering chose, and a device's
    libdevice need not round as eager does. The kernel's text can: it must call what the lowering writes for that
    exponent, the values compared with eager's as the op tests compare them."""
    import torch
    from torch._inductor.utils import run_and_get_code

    fn, called, not_called = POW_FORMULAS[case]
    x = generate_tensor((64, 32), "float32", positive=True) * 0.9
    monkeypatch.setattr(torch._inductor.config, "force_disable_caches", True)
    torch._dynamo.reset()
    compiled, codes = run_and_get_code(torch.compile(fn, backend="inductor"), x)
    assert_equal_to_eager(compiled, fn(x))
    kernels = "\n".join(line for code in codes for line in code.splitlines() if " = " in line and "tmp" in line)
    if called:
        assert called in kernels, f"{case}: the kernel does not call {called!r}:\n{kernels}"
    if not_called:
        assert not_called not in kernels, f"{case}: the kernel calls {not_called!r}:\n{kernels}"
    assert "tmp" in kernels, f"{case}: no Triton kernel computed it"


def test_a_float64_mean_is_refused_by_triton_ascend():
    """torch_npu's mean lowering keeps a float64 input in float64 (it upcasts only float16 and bfloat16), and
    triton-ascend refuses a cast from or to float64 in a kernel off the Ascend 950 ("fp64 is unsupported on Ascend",
    its ``semantic.cast``): the compiled call fails there, on a device as here. An Ascend 950 compiles it (that check
    is skipped there), so this test skips on one."""
    import torch
    from torch_npu._inductor import config

    if config.is_ascend950:
        pytest.skip("needs a chip other than the Ascend 950: triton-ascend casts float64 on a 950")
    x = generate_tensor((16, 33), "float64")
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"fp64\] is unsupported on Ascend"):
        torch.compile(lambda t: t.mean(-1), backend="inductor")(x)

"""Edges of torch_npu's own lowerings (``torch_npu/_inductor/lowering.py``) that the op tests do not reach.

Each test here was written for mutants of those lowerings that survived the op tests (docs/mutation-npu.md): a
registration nothing checked, a cumsum of one dimension or of a scalar, the AOTInductor fallback table torch_npu
extends, and a conversion to complex that does not compile. Values are compared with eager's as in the op tests.
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

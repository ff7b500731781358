"""libdevice in the interpreted device: each function as C (and the device's libdevice) defines it, edge cases first.

The table is in ``pytest_npu_lazy/cann/compute/libdevice.py``; each function here is given the inputs
where NumPy's nearest function and C's definition part (halves, zeros, infinities, NaN, subnormals,
overflow), and one kernel calls triton-ascend's libdevice in Triton's interpreter to show the extern
calls reach these definitions.
"""

from __future__ import annotations

import math
import os

import pytest

pytestmark = [pytest.mark.needs("torch", "triton"), pytest.mark.npu_lazy(preload=["numpy"])]

INF, NAN = float("inf"), float("nan")
#: triton-ascend's libdevice, set by the kernel test once Triton loads interpreted (a kernel finds it here, a global)
libdevice = None
INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1


def _f32(values):
    import numpy as np

    return np.array(values, dtype=np.float32)


def _same(got, expected) -> bool:
    import numpy as np

    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    return bool(np.all((got == expected) | (np.isnan(got) & np.isnan(expected)))
                and np.all(np.signbit(got) == np.signbit(expected)))


def test_round_is_cs_half_away_from_zero_not_numpys_half_to_even():
    from pytest_npu_lazy.cann.compute import libdevice

    x = _f32([2.5, -2.5, 0.5, -0.5, 1.5, 0.49999997, -0.49999997, 8388609.0, 1e30, -0.0, INF, -INF, NAN])
    expected = [3.0, -3.0, 1.0, -1.0, 2.0, 0.0, -0.0, 8388609.0, 1e30, -0.0, INF, -INF, NAN]
    assert _same(libdevice.round_half_away(x), _f32(expected))
    assert _same(libdevice.FUNCTIONS["rint"](_f32([2.5, -2.5, 1.5])), _f32([2.0, -2.0, 2.0]))  # rint: to even


def test_ilogb_gives_cs_exponents_and_its_special_values():
    from pytest_npu_lazy.cann.compute import libdevice

    x = _f32([1.0, 0.5, 3.0, -8.0, 2.0 ** -149, 2.0 ** -126, 3.4e38, 0.0, -0.0, INF, -INF, NAN])
    expected = [0, -1, 1, 3, -149, -126, 127, INT_MIN, INT_MIN, INT_MAX, INT_MAX, INT_MIN]
    assert libdevice.ilogb(x).tolist() == expected


def test_ldexp_is_exact_overflows_to_infinity_and_rounds_subnormals_once():
    import numpy as np

    from pytest_npu_lazy.cann.compute import libdevice

    x = _f32([1.5, 1.0, 1.0, 1.5, -3.0, 0.0, INF, NAN])
    e = _f32([3.0, 128.0, -149.0, -149.0, 2.9, 5.0, -3.0, 1.0])  # the exponent arrives as a float: C's int of it
    got = libdevice.ldexp(x, e)
    expected = [math.ldexp(float(a), int(b)) if math.isfinite(math.ldexp(float(a), int(b))) or math.isinf(a) or
                math.isnan(a) else INF for a, b in zip(x.tolist(), e.tolist())]
    expected[1] = INF  # 2**128 overflows float32
    assert _same(got, np.array(expected, dtype=np.float64).astype(np.float32))


def test_float_pow_keeps_cs_special_cases():
    from pytest_npu_lazy.cann.compute import libdevice

    base, exponent = _f32([NAN, 1.0, -8.0, 0.0, -0.0, 2.0, -2.0]), _f32([0.0, NAN, 1 / 3, -1.0, -1.0, 0.5, 3.0])
    expected = [math.pow(a, b) if not (a == 0 and b < 0) else math.copysign(INF, a)
                for a, b in zip(base.tolist(), exponent.tolist()) if not (a < 0 and b != int(b))]
    import numpy as np

    with np.errstate(all="ignore"):  # pow(0, -1) divides by zero, as C's does: the kernel path hides it too
        got = libdevice.FUNCTIONS["pow"](base, exponent).tolist()
    assert _same(got[:2], [1.0, 1.0])  # pow(NaN, 0) and pow(1, NaN) are 1, as C says
    assert math.isnan(got[2])  # a negative base to a non-integer power
    assert _same(_f32(got[3:]), _f32(expected[2:]))


def test_integer_pow_wraps_and_refuses_what_has_no_value():
    import numpy as np

    from pytest_npu_lazy.cann.compute import libdevice
    from pytest_npu_lazy.cann.compute.gap import InterpreterGap

    base = np.array([3, -2, 7, 2, 1, -1, -1], dtype=np.int32)
    exponent = np.array([4, 3, 0, 31, -5, -3, -4], dtype=np.int32)
    assert libdevice.integer_power(base, exponent).tolist() == [81, -8, 1, INT_MIN, 1, -1, 1]  # 2**31 wraps
    with pytest.raises(InterpreterGap, match="negative exponent and a base other than 1 or -1"):
        libdevice.integer_power(np.array([2], dtype=np.int32), np.array([-1], dtype=np.int32))


def test_erfc_and_the_other_unary_functions_are_cs():
    from pytest_npu_lazy.cann.compute import libdevice

    x = _f32([-3.0, -0.5, 0.0, 0.5, 3.0, 10.0])
    assert _same(libdevice.FUNCTIONS["erfc"](x), _f32([math.erfc(v) for v in x.tolist()]))
    assert _same(libdevice.FUNCTIONS["relu"](_f32([-1.0, 2.0, NAN])), _f32([0.0, 2.0, NAN]))
    assert libdevice.FUNCTIONS["signbit"](_f32([-0.0, 0.0, -NAN])).tolist() == [True, False, True]


def test_extern_symbols_map_to_their_functions_and_an_unknown_one_is_refused():
    from pytest_npu_lazy.cann.compute import libdevice
    from pytest_npu_lazy.cann.compute.gap import InterpreterGap

    assert libdevice.function_of("__hmf_roundf")[0] == "round"
    assert libdevice.function_of("__hmf_recipDh")[0] == "recip"
    assert libdevice.function_of("__hmf_powi")[0] == "powi"
    assert libdevice.function_of("__hmf_isinf")[0] == "isinf"
    with pytest.raises(InterpreterGap, match="libdevice extern __hmf_cyl_bessel_j0f: .* needs a real Ascend device"):
        libdevice.function_of("__hmf_cyl_bessel_j0f")


@pytest.mark.npu_lazy(preload=["torch", "numpy"])
def test_a_kernel_calling_triton_ascends_libdevice_gets_these_definitions():
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton
    import triton.language as tl

    from pytest_npu_lazy.cann.compute import interpreter

    interpreter.install_language_shims()
    interpreter.install_interpreter_shims()
    globals()["libdevice"] = tl.extra.ascend.libdevice  # where the kernel finds it, as torch_npu's kernels do

    @triton.jit
    def kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets)
        tl.store(out_ptr + offsets, libdevice.round(x))
        tl.store(out_ptr + BLOCK + offsets, libdevice.ilogb(x))

    x = torch.tensor([2.5, -2.5, 0.0, 8.0])
    out = torch.empty(8)
    kernel[(1,)](x, out, BLOCK=4)
    assert out.tolist() == [3.0, -3.0, 0.0, 8.0, 1.0, 1.0, float(INT_MIN), 3.0]

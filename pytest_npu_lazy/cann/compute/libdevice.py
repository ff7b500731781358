"""libdevice in Triton's interpreter: each function the device's libdevice defines, with that definition's semantics.

The interpreter has no extern calls (``create_extern_elementwise`` raises), so a kernel calling
triton-ascend's ``libdevice`` (``__hmf_<name><suffix>`` symbols) or a name torch's codegen asks of
``libdevice`` that neither triton-ascend's libdevice nor ``tl.math`` has would stop. Each such
function is computed here with NumPy, with C's definition of the function where NumPy's differs:

=============  ==========================================  =========================================
function       definition                                  where NumPy differs, done here instead
=============  ==========================================  =========================================
recip          1 / x (IEEE division)                       -
log1p, tan,    C's ``log1p`` ... (a few ulp, as a          -
atan, tanh     device's)
relu           max(x, 0); NaN stays NaN                    -
isinf, isnan   C's classification                          -
ilogb          C's ``ilogbf``: the unbiased exponent,      NumPy has none; ``frexp`` gives the
               subnormals included; ``ilogb(0)`` =         exponent, and 0 / inf / NaN get C's
               FP_ILOGB0 = INT_MIN, ``ilogb(inf)`` =       values (those of glibc on x86-64 and of
               INT_MAX, ``ilogb(NaN)`` = FP_ILOGBNAN =     CUDA's libdevice; C leaves INT_MIN or
               INT_MIN                                     -INT_MAX, INT_MIN or INT_MAX to the
                                                           library); returned as the symbol's type
ldexp          x * 2**e, exact, overflow to inf,           the exponent operand arrives as a float:
               subnormal results rounded once              taken as C's int (toward zero)
pow (float)    C's ``powf``: pow(x, 0) = 1 and             -
               pow(1, y) = 1 even for NaN
pow (integer)  repeated multiplication, wrapping in the    NumPy refuses negative exponents: 1 and
               type                                        -1 have exact answers; any other base
                                                           with a negative exponent is refused by
                                                           name (torch refuses it too)
round          C's ``roundf``: half away from zero         NumPy's ``rint`` rounds half to even
                                                           (2.5 -> 2); here 2.5 -> 3, -2.5 -> -3
rint,          round half to even (the default mode)       -
nearbyint
trunc, expm1,  C's functions                               -
log10, asin,
... signbit
erfc           C's ``erfc``                                NumPy has none: Python's ``math.erfc``
                                                           per element, in float64, rounded once
=============  ==========================================  =========================================

bfloat16 operands compute in float32 and the result rounds once to bfloat16 (:mod:`.numerics`).
A symbol or name not in this table is refused by name (:class:`.gap.InterpreterGap`).
"""

from __future__ import annotations

import math

import numpy as np

from .gap import NEEDS_A_DEVICE, InterpreterGap
from .numerics import STORAGE, convert, values_of

INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1


def ilogb(x: np.ndarray) -> np.ndarray:
    """C's ``ilogb``: the unbiased binary exponent; 0 -> INT_MIN, +-inf -> INT_MAX, NaN -> INT_MIN."""
    x = np.asarray(x)
    with np.errstate(invalid="ignore"):
        exponent = (np.frexp(x)[1] - 1).astype(np.int64)
    exponent = np.where(x == 0, INT_MIN, exponent)
    exponent = np.where(np.isinf(x), INT_MAX, exponent)
    return np.where(np.isnan(x), INT_MIN, exponent)


def ldexp(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """x * 2**exponent, with the exponent taken as C's int (a float operand converts toward zero)."""
    exponent = np.asarray(exponent)
    if not np.issubdtype(exponent.dtype, np.integer):
        with np.errstate(invalid="ignore"):
            exponent = np.clip(np.trunc(exponent), INT_MIN, INT_MAX).astype(np.int64)
    with np.errstate(over="ignore"):  # overflow to infinity is the definition, not a mishap
        return np.ldexp(x, np.clip(exponent, INT_MIN, INT_MAX).astype(np.int32))


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's ``round``: to the nearest integer, halves away from zero (``x - trunc(x)`` is exact in floating point)."""
    whole = np.trunc(x)
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, and the result is x itself there
        half = np.abs(x - whole) >= 0.5
    return np.where(half, whole + np.copysign(np.ones_like(x), x), whole).astype(x.dtype)


def integer_power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """base ** exponent in the integers' own type, wrapping as the device's multipliers do."""
    base, exponent = np.broadcast_arrays(np.asarray(base), np.asarray(exponent))
    negative = exponent < 0
    if np.any(negative & (np.abs(base) != 1)):
        raise InterpreterGap(f"libdevice pow of integers with a negative exponent and a base other than 1 or -1: "
                             f"C and torch give it no value, and the device's is not stated; {NEEDS_A_DEVICE}")
    result = np.ones_like(base)
    power, remaining = base.copy(), np.abs(exponent).astype(np.int64)
    with np.errstate(over="ignore"):
        while np.any(remaining):
            odd = (remaining & 1).astype(bool)
            result = np.where(odd, result * power, result)
            power = power * power
            remaining >>= 1
    return result


def _erfc(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erfc, otypes=[np.float64])(x).astype(x.dtype)


#: libdevice's functions by name: what computes them here
FUNCTIONS = {
    "recip": np.reciprocal, "reciprocal": np.reciprocal, "log1p": np.log1p, "tan": np.tan, "atan": np.arctan,
    "tanh": np.tanh, "relu": lambda x: np.maximum(x, np.zeros_like(x)), "isinf": np.isinf, "isnan": np.isnan,
    "isfinited": np.isfinite, "ilogb": ilogb, "ldexp": ldexp, "pow": np.power, "powi": integer_power,
    "round": round_half_away, "rint": np.rint, "nearbyint": np.rint, "trunc": np.trunc, "expm1": np.expm1,
    "log10": np.log10, "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "signbit": np.signbit, "erfc": _erfc,
}
#: suffixes of triton-ascend's extern symbols: float32 ("f"), float16 ("Dh")
SUFFIXES = ("Dh", "f")


def function_of(symbol: str):
    """The function behind an extern symbol (``__hmf_roundf`` -> C's ``round``), or an InterpreterGap naming it."""
    stem = symbol.removeprefix("__hmf_")
    if stem in FUNCTIONS:
        return stem, FUNCTIONS[stem]
    for suffix in SUFFIXES:
        name = stem.removesuffix(suffix)
        if name != stem and name in FUNCTIONS:
            return name, FUNCTIONS[name]
    raise InterpreterGap(f"libdevice extern {symbol}: Triton's interpreter has no implementation of it here; "
                         f"{NEEDS_A_DEVICE}")


def apply(function, arrays: list[np.ndarray], types: list[str], result_type: str | None) -> np.ndarray:
    """``function`` over operands stored as ``types``, its result stored as ``result_type`` (bfloat16 computes in
    float32 and rounds once); ``None``: a predicate's booleans as they are, any other result as the first operand."""
    values = [values_of(data, name) for data, name in zip(arrays, types)]
    with np.errstate(all="ignore"):
        result = np.asarray(function(*values))
    if result.dtype == bool:
        return result if result_type in (None, "int1") else result.astype(STORAGE[result_type])
    result_type = result_type or types[0]
    source = "fp32" if result.dtype == np.float32 else {np.dtype(np.float16): "fp16", np.dtype(np.float64): "fp64"}.get(
        result.dtype)
    if source is None:  # integers: an integer result type takes them as they are, a float one converts them
        return result.astype(STORAGE[result_type]) if result_type != "bf16" else convert(result.astype(np.float32),
                                                                                           "fp32", "bf16")
    return convert(result, source, result_type)


def extern_elementwise(builder, lib_name, lib_path, symbol, arg_list, ret_type, is_pure):
    """The interpreter builder's missing extern call: triton-ascend's libdevice symbols, as defined above."""
    from triton.runtime.interpreter import TensorHandle

    _, function = function_of(symbol)
    types = [arg.dtype.scalar.name for arg in arg_list]
    data = apply(function, [arg.data for arg in arg_list], types, ret_type.scalar.name)
    return TensorHandle(data, ret_type.scalar)


def unary(name: str, x, _builder=None):
    """A name torch's codegen asks of ``libdevice`` that neither triton-ascend's libdevice nor ``tl.math`` has."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    function = FUNCTIONS.get(name)
    if function is None:
        raise InterpreterGap(f"libdevice.{name}: no implementation in Triton's interpreter here; {NEEDS_A_DEVICE}")
    data = apply(function, [x.handle.data], [x.handle.dtype.scalar.name], None)
    if data.dtype == bool:
        return tl.core.tensor(TensorHandle(data, tl.int1),
                              x.type.with_element_ty(tl.int1) if x.type.is_block() else tl.int1)
    return tl.core.tensor(TensorHandle(data, x.handle.dtype), x.type)

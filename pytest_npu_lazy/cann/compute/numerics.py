"""What an interpreted kernel computes, made what the device computes: conversions, NaN rules, integer division.

Triton's interpreter evaluates a kernel with NumPy on arrays that hold each Triton type (bfloat16
as the uint16 of its bits). Where NumPy's answer is not the device's, the device's is computed
here, bit for bit where the device's makers state it (docs/emulated-npu.md, "The interpreter
against the device", has the table):

- **Conversions** round to nearest, ties to even, unless ``tl.cast`` asks for ``"rtz"``: ties,
  carries into the exponent, overflow to infinity, subnormals and signed zeros exactly as
  ``torch``'s conversions (the interpreter as shipped truncates float32 to bfloat16, and casts
  an integer to bfloat16 by storing the integer as the bits). NaN stays NaN with its sign,
  quieted as a converter in hardware quiets it (torch's own CPU paths disagree with each other
  on a narrowed NaN's bits; bfloat16 widens by a shift, keeping them, as in torch).
  float64 narrows through float32, as torch's ``c10::BFloat16`` and ``c10::Half`` take a float.
  fp8 types are refused by name: torch_npu's kernels never use them, and no converter here is
  shown exact for them.
- **bfloat16 arithmetic**: the interpreter would add the uint16 bits as integers; each float
  operation on bfloat16 operands computes in float32 and rounds once (exact for ``+ - * /`` and
  ``sqrt``: float32 has more than twice bfloat16's 8 bits, so the double rounding is innocuous).
- **NaN rules**: ``tl.minimum``/``tl.maximum`` without NaN propagation are IEEE minNum/maxNum
  (a NaN operand loses), with it NaN wins and -0 < +0; unordered comparisons (``ULT``...) are
  true on NaN and ``ONE`` false; ``clamp`` propagates NaN only when asked; ``frem`` is C's
  ``fmod`` (LLVM's), not Python's remainder. triton-ascend lowers a float ``%`` to HFusion's
  ``mod`` instead, whose semantics are not stated: refused by name.
- **Integer division by zero saturates**, as triton-ascend states for the NPU (its PR #1346):
  ``x // 0`` is the type's maximum for ``x > 0``, its minimum for ``x < 0``, 0 for ``0 // 0``.
- ``fma`` rounds the exact product once more in float64 before the result's type (a fused
  multiply-add rounds once: the two differ only where the float64 sum lands on a tie of the
  narrower type).

What NumPy computes as a device would (loads, stores, integer wrap-around, ``where``, float32
``+ - * /`` and ``sqrt``, which IEEE fixes) is left to the interpreter. Transcendental functions
(``exp``, ``sin``...) are NumPy's, within a few units in the last place, as a device's are: no
bit-exact claim is made for them.
"""

from __future__ import annotations

import functools

import numpy as np

from .gap import NEEDS_A_DEVICE, InterpreterGap

#: how the interpreter stores each Triton type (bfloat16 as its bits)
STORAGE = {
    "int1": np.dtype(bool), "int8": np.dtype(np.int8), "uint8": np.dtype(np.uint8), "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16), "int32": np.dtype(np.int32), "uint32": np.dtype(np.uint32),
    "int64": np.dtype(np.int64), "uint64": np.dtype(np.uint64), "fp16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16), "fp32": np.dtype(np.float32), "fp64": np.dtype(np.float64),
}
FLOATS = ("fp16", "bf16", "fp32", "fp64")
FP8 = frozenset({"fp8e5", "fp8e5b16", "fp8e4nv", "fp8e4b8", "fp8e4b15"})
ROUNDINGS = ("rtne", "rtz")


# --------------------------------------------------------------------------- conversions


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bits: exact (bfloat16 is float32's upper half)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: np.ndarray, rounding: str = "rtne") -> np.ndarray:
    """bfloat16 bits of float32 values: round to nearest even (torch's ``round_to_nearest_even``) or toward zero.

    The carry of a rounding runs into the exponent by itself (0x7F7FFFFF becomes infinity); a NaN keeps its sign
    and the upper bits of its payload, quieted, as a converter in hardware leaves it.
    """
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    if rounding == "rtz":
        rounded = bits >> 16
    else:
        with np.errstate(over="ignore"):
            rounded = (bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16
    rounded = np.where(np.isnan(values), (bits >> 16) | np.uint32(0x0040), rounded)
    return rounded.astype(np.uint16)


def _toward_zero(source: np.ndarray, nearest: np.ndarray) -> np.ndarray:
    """The value toward zero of a round-to-nearest result: one step back wherever nearest rounded away."""
    wide, back = source.astype(np.float64), nearest.astype(np.float64)
    with np.errstate(invalid="ignore"):
        away = np.abs(back) > np.abs(wide)
    return np.where(away, np.nextafter(nearest, np.zeros_like(nearest)), nearest)


#: the quiet bit of each float type's NaN, by its storage's unsigned integer type
_QUIET = {np.dtype(np.float16): (np.uint16, 0x0200), np.dtype(np.float32): (np.uint32, 0x00400000),
          np.dtype(np.float64): (np.uint64, 0x0008000000000000)}


def _quiet(values: np.ndarray) -> np.ndarray:
    """A converted signalling NaN comes out quiet, as a converter in hardware (and torch's float16 upcast) gives it;
    NumPy's conversion keeps it signalling."""
    unsigned, bit = _QUIET[values.dtype]
    nan = np.isnan(values)
    if not np.any(nan):
        return values
    bits = np.array(values, copy=True).view(unsigned)
    bits[nan] |= unsigned(bit)
    return bits.view(values.dtype)


def values_of(data: np.ndarray, name: str) -> np.ndarray:
    """The numbers a stored array means (bfloat16 bits become float32 values)."""
    return bf16_to_float32(data) if name == "bf16" else np.asarray(data)


def _refuse_fp8(source: str, target: str) -> None:
    if source in FP8 or target in FP8:
        raise InterpreterGap(f"a conversion from {source} to {target}: fp8 conversions in Triton's interpreter are "
                             f"not shown to round as the device does, and torch_npu's kernels use none; "
                             f"{NEEDS_A_DEVICE}")


def convert(data: np.ndarray, source: str, target: str, rounding: str | None = None) -> np.ndarray:
    """``data`` stored as Triton type ``source``, converted to ``target`` as the device converts, stored as the
    interpreter stores ``target``.

    ``rounding``: ``"rtne"`` (the default of every float narrowing) or ``"rtz"`` (``tl.cast(...,
    fp_downcast_rounding="rtz")``). A float becomes an integer toward zero, as C converts; a NaN or an out-of-range
    value has no defined integer (LLVM's ``fptosi`` is poison there) and gets what the host's conversion gives.
    """
    _refuse_fp8(source, target)
    rounding = rounding or "rtne"
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding {rounding!r}: one of {', '.join(ROUNDINGS)}")
    values = values_of(data, source)
    if target == "int1":
        return values != 0
    if target not in FLOATS:
        with np.errstate(invalid="ignore"):
            return values.astype(STORAGE[target])
    if target in ("bf16", "fp16") and values.dtype != np.float32 and source in FLOATS:
        values = convert(values, source, "fp32", rounding)  # float64 through float32, as torch narrows it
    if target == "bf16":
        return float32_to_bf16(values.astype(np.float32) if values.dtype != np.float32 else values, rounding)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = values.astype(STORAGE[target])
    if nearest.dtype != values.dtype:
        nearest = _quiet(nearest)
    narrowing = source in FLOATS and np.dtype(STORAGE[target]).itemsize < values.dtype.itemsize
    return _toward_zero(values, nearest) if rounding == "rtz" and narrowing else nearest


def rounding_name(mode) -> str | None:
    """``"rtne"``/``"rtz"`` for the IR's rounding mode enum (``None`` stays None: the default)."""
    return None if mode is None else getattr(mode, "name", str(mode)).rsplit(".", 1)[-1].lower()


# --------------------------------------------------------------------------- elementwise, as the device


def minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE minimum: NaN wins, -0 < +0 (``tl.minimum(..., propagate_nan=ALL)``)."""
    out = np.minimum(a, b)
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, np.where(np.signbit(a), a, b), out) if np.any(zeros) else out


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IEEE maximum: NaN wins, +0 > -0 (``tl.maximum(..., propagate_nan=ALL)``)."""
    out = np.maximum(a, b)
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, np.where(np.signbit(a), b, a), out) if np.any(zeros) else out


def clamp(x: np.ndarray, low: np.ndarray, high: np.ndarray, propagate_nan: bool) -> np.ndarray:
    """``tl.clamp``: a NaN ``x`` gives NaN only with NaN propagation, else the clamp of maxNum/minNum (``low``)."""
    clamped = np.fmin(np.fmax(x, low), high)
    return np.where(np.isnan(x), x, clamped) if propagate_nan else clamped


def fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """x * y + z with the product exact (float64) and one rounding in float64 before the result's type."""
    exact = x.astype(np.float64) * y.astype(np.float64) + z.astype(np.float64)
    return exact.astype(z.dtype)


def integer_divide(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """C's truncating integer division; by zero it saturates as the NPU does (triton-ascend PR #1346)."""
    lhs, rhs = np.broadcast_arrays(lhs, rhs)
    zero = rhs == 0
    safe = np.where(zero, np.ones_like(rhs), rhs)
    quotient = (lhs - np.fmod(lhs, safe)) // safe
    if not np.any(zero):
        return quotient
    info = np.iinfo(quotient.dtype)
    saturated = np.where(lhs > 0, info.max, np.where(lhs < 0, info.min, 0)).astype(quotient.dtype)
    return np.where(zero, saturated, quotient)


def refuse_float_mod(self, lhs, rhs):
    """triton-ascend lowers a float ``%`` to HFusion's ``mod`` (``create_mod``), whose sign and rounding its makers
    do not state; the interpreter as shipped has no ``create_mod`` at all."""
    raise InterpreterGap(f"a float % ({lhs.dtype.scalar.name}): triton-ascend lowers it to HFusion's mod, whose "
                         f"semantics (the sign of the result, C's fmod or Python's %) are not stated; {NEEDS_A_DEVICE}")


def _unordered(a, b):
    return np.isnan(a) | np.isnan(b)


#: the builder's comparisons whose NumPy form the interpreter gets wrong on NaN
COMPARISONS = {
    "create_fcmpONE": lambda a, b: np.not_equal(a, b) & ~_unordered(a, b),
    "create_fcmpUEQ": lambda a, b: np.equal(a, b) | _unordered(a, b),
    "create_fcmpULT": lambda a, b: np.less(a, b) | _unordered(a, b),
    "create_fcmpUGT": lambda a, b: np.greater(a, b) | _unordered(a, b),
    "create_fcmpULE": lambda a, b: np.less_equal(a, b) | _unordered(a, b),
    "create_fcmpUGE": lambda a, b: np.greater_equal(a, b) | _unordered(a, b),
}

#: builder methods that compute on float operands, with the argument whose type the result takes
#: (bfloat16 operands compute in float32 and the result rounds once, where that argument was bfloat16)
FLOAT_OPERATIONS = {
    **{name: 0 for name in (
        "create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_precise_divf",
        "create_minnumf", "create_maxnumf", "create_minimumf", "create_maximumf", "create_fcmpOLT", "create_fcmpOGT",
        "create_fcmpOLE", "create_fcmpOGE", "create_fcmpOEQ", "create_fcmpONE", "create_fcmpULT", "create_fcmpUGT",
        "create_fcmpULE", "create_fcmpUGE", "create_fcmpUEQ", "create_fcmpUNE", "create_cos", "create_sin",
        "create_exp", "create_exp2", "create_log", "create_log2", "create_sqrt", "create_precise_sqrt",
        "create_rsqrt", "create_floor", "create_ceil", "create_erf")},
    "create_clampf": 0, "create_fma": 2, "create_dot": 2,
}


def _bf16(handle) -> bool:
    return getattr(getattr(handle, "dtype", None), "name", None) == "bf16"


def in_float32_for_bfloat16(method, result_from: int, handle_type):
    """A builder method that computes bfloat16 operands in float32 and rounds its bfloat16 result once."""

    @functools.wraps(method)
    def computed(self, *args):
        if not any(_bf16(arg) for arg in args):
            return method(self, *args)
        float32 = self.get_float_ty()
        decoded = [handle_type(bf16_to_float32(arg.data), float32) if _bf16(arg) else arg for arg in args]
        out = method(self, *decoded)
        if not _bf16(args[result_from]):
            return out
        if out.data.dtype == np.float32:
            return handle_type(float32_to_bf16(out.data), args[result_from].dtype)
        return handle_type(out.data, args[result_from].dtype)  # a comparison: its booleans, typed as before

    return computed


def install(interpreter) -> list[str]:
    """Make the interpreter's builder compute as the device does; returns what was changed, for the header.

    Called as ``triton.runtime.interpreter`` loads, which can be while ``triton.language`` is still loading: nothing
    here reads ``triton.language`` until a kernel runs."""
    builder = interpreter.InterpreterBuilder
    handle = interpreter.TensorHandle
    if getattr(builder, "_npu_lazy_numerics", False):
        return []

    def cast_impl(self, src, dst_type):
        data = convert(src.data, src.dtype.scalar.name, dst_type.scalar.name)
        return handle(data, dst_type.scalar)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        data = convert(src.data, src.dtype.scalar.name, dst_type.scalar.name, rounding_name(rounding_mode))
        return handle(data, dst_type.scalar)

    def binary(function):
        return lambda self, lhs, rhs: handle(function(lhs.data, rhs.data), lhs.dtype.scalar)

    builder.cast_impl = cast_impl
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si", "create_fp_to_ui", "create_fp_ext",
                 "create_fp_trunc"):
        setattr(builder, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    builder.create_int_cast = lambda self, src, dst_type, is_signed: self.cast_impl(src, dst_type)
    builder.create_fp_to_fp = create_fp_to_fp
    builder.create_minnumf = binary(np.fmin)
    builder.create_maxnumf = binary(np.fmax)
    builder.create_minimumf = binary(minimum)
    builder.create_maximumf = binary(maximum)
    builder.create_frem = binary(np.fmod)
    builder.create_mod = refuse_float_mod
    builder.create_idiv = lambda self, lhs, rhs: handle(integer_divide(lhs.data, rhs.data), lhs.dtype.scalar)
    for name, function in COMPARISONS.items():
        setattr(builder, name, binary(function))
    builder.create_clampf = lambda self, x, low, high, propagate_nan: handle(
        clamp(x.data, low.data, high.data, bool(int(propagate_nan))), x.dtype.scalar)
    builder.create_fma = lambda self, x, y, z: handle(fma(x.data, y.data, z.data), z.dtype.scalar)
    for name, result_from in FLOAT_OPERATIONS.items():
        setattr(builder, name, in_float32_for_bfloat16(getattr(builder, name), result_from, handle))
    builder._npu_lazy_numerics = True
    return ["conversions round to nearest even (rtz where asked), exactly as torch's",
            "bfloat16 arithmetic in float32, rounded once", "IEEE NaN rules of min/max, clamp and comparisons",
            "frem is fmod, a float % (HFusion's mod) refused", "integer division by zero saturates (as the NPU)"]

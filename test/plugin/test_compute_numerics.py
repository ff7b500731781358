"""The interpreted device computes what a device computes: conversions bit for bit, NaN rules, division, reductions.

Conversions are compared with ``torch``'s over every boundary class of bfloat16 and float16
(ties either way, carries into the exponent, overflow, subnormals, zeros, NaN), and the
interpreter as shipped is shown to fail the same comparison, so the comparison can fail. The
other semantics are the device's as its makers state them (docs/emulated-npu.md): each test
writes the expected values out. Kernels run in Triton's interpreter with the compute mode's
changes installed, in an isolated child (``TRITON_INTERPRET=1`` must be set before Triton
loads, and no other test may see it).
"""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.needs("torch", "triton"), pytest.mark.npu_lazy(preload=["torch", "numpy"])]


def _np():
    import numpy

    return numpy


def _bits_of_bf16(tensor):
    """torch bfloat16 values as their uint16 bits."""
    return tensor.view(__import__("torch").int16).numpy().view(_np().uint16)


def _boundary_float32_for_bf16():
    """Every bfloat16 value, and the float32 values around each one's rounding boundaries: just above it, one below
    the tie, the tie, one above the tie, the last value before the next bfloat16."""
    np = _np()
    upper = np.arange(65536, dtype=np.uint32) << 16
    offsets = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)
    return (upper[:, None] | offsets[None, :]).ravel().view(np.float32)


def _boundary_float32_for_fp16():
    """Every float16 value, the midpoints between neighbours and one float32 step either side of each, the
    overflow threshold and the smallest subnormal's halves."""
    np = _np()
    halves = np.arange(65536, dtype=np.uint16).view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(np.float64))
    finite = np.unique(finite)
    mid = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)  # exact in float32 (12 bits)
    around = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))])
    edges = np.array([65504, 65519.996, 65520, 65520.004, 70000, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -26,
                      1e-30, -1e-30, 3.4e38, -3.4e38], dtype=np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], dtype=np.float32)
    return np.concatenate([halves.astype(np.float32), around, edges, -edges, specials])


def _compare(ours, theirs, values, what: str) -> None:
    np = _np()
    nan = np.isnan(values)
    wrong = np.flatnonzero(ours[~nan] != theirs[~nan])
    assert wrong.size == 0, (f"{what}: {wrong.size} of {(~nan).sum()} values differ from torch, e.g. "
                             f"{values[~nan][wrong[:5]].tolist()}")


def test_float32_to_bfloat16_equals_torch_bit_for_bit_and_the_shipped_interpreter_does_not():
    import torch
    from triton.language import bfloat16, float32
    from triton.runtime.interpreter import _convert_float

    from pytest_npu_lazy.cann.compute import numerics

    np = _np()
    values = _boundary_float32_for_bf16()
    theirs = _bits_of_bf16(torch.from_numpy(values).to(torch.bfloat16))
    ours = numerics.convert(values, "fp32", "bf16")
    _compare(ours, theirs, values, "float32 -> bfloat16")
    nan = np.isnan(values)
    decoded = numerics.bf16_to_float32(ours[nan])
    assert np.isnan(decoded).all() and (np.signbit(decoded) == np.signbit(values[nan])).all()
    shipped = _convert_float(values, float32, bfloat16, None).view(np.uint16)
    assert (shipped[~nan] != theirs[~nan]).sum() > 0.3 * (~nan).sum(), "the interpreter as shipped rounds now"


def test_float32_to_float16_and_every_upcast_equal_torch_bit_for_bit():
    import torch

    from pytest_npu_lazy.cann.compute import numerics

    np = _np()
    values = _boundary_float32_for_fp16()
    theirs = torch.from_numpy(values).to(torch.float16).numpy()
    ours = numerics.convert(values, "fp32", "fp16")
    _compare(ours.view(np.uint16), theirs.view(np.uint16), values, "float32 -> float16")
    bits = np.arange(65536, dtype=np.uint16)
    bf16 = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    for name, torch_values in (("bf16", bf16), ("fp16", torch.from_numpy(bits.view(np.float16)))):
        stored = bits if name == "bf16" else bits.view(np.float16)
        up = numerics.convert(stored, name, "fp32")
        expected = torch_values.float().numpy()
        assert np.array_equal(up.view(np.uint32), expected.view(np.uint32)), name


def test_float64_and_integers_narrow_as_torch_narrows_them():
    import torch

    from pytest_npu_lazy.cann.compute import numerics

    np = _np()
    rng = np.random.default_rng(0)
    wide = np.concatenate([rng.standard_normal(20000) * 1000, 1.0 + np.arange(1, 2000) * 2.0 ** -9 + 2.0 ** -40,
                           1.0 + np.arange(1, 2000) * 2.0 ** -11 + 2.0 ** -40, [1e300, -1e300, 1e-300, 0.0]])
    wide_torch = torch.from_numpy(wide)
    _compare(numerics.convert(wide, "fp64", "bf16"), _bits_of_bf16(wide_torch.to(torch.bfloat16)), wide, "f64->bf16")
    _compare(numerics.convert(wide, "fp64", "fp16").view(np.uint16),
             wide_torch.to(torch.float16).numpy().view(np.uint16), wide, "float64 -> float16")
    for dtype in (np.int32, np.int64):
        info = np.iinfo(dtype)
        ints = np.concatenate([np.arange(-600, 600), [257, 259, 2 ** 24 + 1, 2 ** 24 + 3, info.max, info.min],
                               rng.integers(info.min, info.max, 5000)]).astype(dtype)
        name = f"int{np.dtype(dtype).itemsize * 8}"
        ints_torch = torch.from_numpy(ints)
        _compare(numerics.convert(ints, name, "bf16"), _bits_of_bf16(ints_torch.to(torch.bfloat16)), ints, name)
        _compare(numerics.convert(ints, name, "fp16").view(np.uint16),
                 ints_torch.to(torch.float16).numpy().view(np.uint16), ints, name)
    inside = np.linspace(-30000, 30000, 4001).astype(np.float32)
    stored = numerics.convert(inside, "fp32", "bf16")
    torch_bf16 = torch.from_numpy(stored.view(np.int16)).view(torch.bfloat16)
    assert np.array_equal(numerics.convert(stored, "bf16", "int32"), torch_bf16.to(torch.int32).numpy())


@pytest.mark.parametrize("target", ["bf16", "fp16"])
def test_round_toward_zero_never_rounds_away_and_stops_at_the_largest_finite(target):
    from pytest_npu_lazy.cann.compute import numerics

    np = _np()
    values = _boundary_float32_for_bf16() if target == "bf16" else _boundary_float32_for_fp16()
    values = values[np.isfinite(values)]
    rounded = numerics.values_of(numerics.convert(values, "fp32", target, "rtz"), target).astype(np.float64)
    nearest = numerics.values_of(numerics.convert(values, "fp32", target), target).astype(np.float64)
    assert (np.abs(rounded) <= np.abs(values.astype(np.float64))).all()
    assert np.isfinite(rounded).all()  # overflow goes to the largest finite value, not infinity
    # the next value away from zero is past the input: nothing representable lies between
    stored = numerics.convert(rounded.astype(np.float32), "fp32", target)
    step = numerics.values_of(stored, target)
    with np.errstate(over="ignore"):  # the largest finite value's next is infinity
        away = (numerics.bf16_to_float32(stored + np.where(np.isfinite(step), 1, 0).astype(np.uint16))
                if target == "bf16" else np.nextafter(step, np.copysign(np.inf, step).astype(step.dtype)))
    assert (np.abs(away.astype(np.float64)) > np.abs(values.astype(np.float64))).all()
    assert ((rounded == nearest) | (np.abs(nearest) > np.abs(values))).all()  # it differs only where nearest went away


def test_fp8_conversions_are_refused_by_name():
    from pytest_npu_lazy.cann.compute import numerics
    from pytest_npu_lazy.cann.compute.gap import InterpreterGap

    with pytest.raises(InterpreterGap, match="fp8e5 to fp32: fp8 conversions .* needs a real Ascend device"):
        numerics.convert(_np().zeros(4, dtype=_np().uint8), "fp8e5", "fp32")


# --------------------------------------------------------------------------- in interpreted kernels


@pytest.fixture
def interpreted():
    """Triton's interpreter with the compute mode's changes to it, in this isolated child only."""
    os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language as tl

    from pytest_npu_lazy.cann.compute import interpreter

    interpreter.install_language_shims()
    from triton.runtime import interpreter as triton_interpreter

    interpreter.install_interpreter_shims()
    return triton, tl, triton_interpreter


def test_an_interpreted_bfloat16_downcast_and_integer_cast_equal_torch(interpreted):
    import torch

    triton, tl, _ = interpreted

    @triton.jit
    def downcast(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets).to(tl.bfloat16))

    torch.manual_seed(0)
    x = torch.randn(4096) * 2000
    y = torch.empty(4096, dtype=torch.bfloat16)
    downcast[(1,)](x, y, BLOCK=4096)
    assert torch.equal(y.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    ints = torch.arange(-300, 300, dtype=torch.int32)[:512]
    out = torch.empty(512, dtype=torch.bfloat16)
    downcast[(1,)](ints, out, BLOCK=512)
    assert torch.equal(out, ints.to(torch.bfloat16))


def test_bfloat16_arithmetic_rounds_once_as_torch_does(interpreted):
    import torch

    triton, tl, _ = interpreted

    @triton.jit
    def arithmetic(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        a, b = tl.load(a_ptr + offsets), tl.load(b_ptr + offsets)
        tl.store(out_ptr + offsets, a + b)
        tl.store(out_ptr + BLOCK + offsets, a * b)
        tl.store(out_ptr + 2 * BLOCK + offsets, a - b)
        tl.store(out_ptr + 3 * BLOCK + offsets, tl.where(a < b, a, b))

    torch.manual_seed(1)
    a, b = (torch.randn(1024) * 300).bfloat16(), (torch.randn(1024) * 3).bfloat16()
    out = torch.empty(4 * 1024, dtype=torch.bfloat16)
    arithmetic[(1,)](a, b, out, BLOCK=1024)
    for index, expected in enumerate((a + b, a * b, a - b, torch.minimum(a, b))):
        assert torch.equal(out[index * 1024:(index + 1) * 1024], expected), index


def test_nan_rules_clamp_fmod_and_division_by_zero_are_the_devices(interpreted):
    import torch

    triton, tl, _ = interpreted
    nan = float("nan")

    @triton.jit
    def floats(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        a, b = tl.load(a_ptr + offsets), tl.load(b_ptr + offsets)
        tl.store(out_ptr + offsets, tl.maximum(a, b))
        tl.store(out_ptr + BLOCK + offsets, tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL))
        tl.store(out_ptr + 2 * BLOCK + offsets, tl.minimum(a, b))
        tl.store(out_ptr + 3 * BLOCK + offsets, tl.math.fma(a, b, a))
        tl.store(out_ptr + 4 * BLOCK + offsets, tl.clamp(a, -1.0, 1.0))
        tl.store(out_ptr + 5 * BLOCK + offsets, tl.clamp(a, -1.0, 1.0, propagate_nan=tl.PropagateNan.ALL))

    a = torch.tensor([nan, 1.0, -7.5, 3.0])
    b = torch.tensor([2.0, nan, 2.0, -2.0])
    out = torch.empty(24)
    floats[(1,)](a, b, out, BLOCK=4)
    rows = [row.tolist() for row in out.reshape(6, 4)]
    assert rows[0] == [2.0, 1.0, 2.0, 3.0]  # maxNum: a NaN loses
    assert str(rows[1][:2]) == "[nan, nan]" and rows[1][2:] == [2.0, 3.0]  # NaN propagation asked: it wins
    assert rows[2] == [2.0, 1.0, -7.5, -2.0]
    assert rows[3][2:] == [-22.5, -3.0]
    assert rows[4] == [-1.0, 1.0, -1.0, 1.0]  # a NaN clamps to the low bound without NaN propagation
    assert str(rows[5][0]) == "nan"

    @triton.jit
    def divide(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(a_ptr + offsets) // tl.load(b_ptr + offsets))

    numerators = torch.tensor([7, -7, 7, -7, 0, 9], dtype=torch.int32)
    denominators = torch.tensor([2, 2, 0, 0, 0, -4], dtype=torch.int32)
    quotients = torch.empty(6, dtype=torch.int32)
    divide[(1,)](numerators, denominators, quotients, BLOCK=6)
    assert quotients.tolist() == [3, -3, 2 ** 31 - 1, -2 ** 31, 0, -2]  # C truncation; by zero saturating

    @triton.jit
    def remainder(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(a_ptr + offsets) % tl.load(b_ptr + offsets))

    with pytest.raises(Exception, match="a float % \\(fp32\\): triton-ascend lowers it to HFusion's mod"):
        remainder[(1,)](a, b, out, BLOCK=4)


def test_reductions_ignore_nan_in_max_and_min_and_accumulate_as_the_device(interpreted):
    import torch

    triton, tl, _ = interpreted

    @triton.jit
    def reduce(x_ptr, out_ptr, BLOCK: tl.constexpr):
        values = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(out_ptr, tl.max(values, 0))
        tl.store(out_ptr + 1, tl.min(values, 0))

    out = torch.empty(2)
    reduce[(1,)](torch.tensor([1.0, float("nan"), 3.0, -2.0]), out, BLOCK=4)
    assert out.tolist() == [3.0, -2.0]
    reduce[(1,)](torch.full((4,), float("nan")), out, BLOCK=4)
    assert torch.isnan(out).all()

    @triton.jit
    def total(x_ptr, out_ptr, BLOCK: tl.constexpr):
        tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), 0))

    halves = torch.full((4096,), 0.1, dtype=torch.float16)
    half_out = torch.empty(1, dtype=torch.float16)
    total[(1,)](halves, half_out, BLOCK=4096)
    assert half_out.item() == (halves.float().sum()).half().item() == 409.5  # float16 adds alone would stall at 256
    ints = torch.full((4,), 2 ** 30, dtype=torch.int32)
    int_out = torch.zeros(2, dtype=torch.int32)
    total[(1,)](ints, int_out, BLOCK=4)
    assert int_out.tolist() == [0, 0]  # wrapped in int32, and nothing written past the one element


def test_the_reduction_fast_path_replaces_only_torchs_own_combine_functions(interpreted):
    import torch
    from torch._inductor.runtime import triton_helpers

    from pytest_npu_lazy.cann.compute.reductions import COMBINES

    triton, tl, _ = interpreted
    assert COMBINES.difference(triton_helpers.maximum) is None
    assert COMBINES.difference(triton_helpers.minimum_with_index) is None

    @triton.jit
    def maximum(a, b):  # Inductor's name, a body that computes the minimum: a regression the fast path must not hide
        mask = a < b
        return tl.where(mask, a, b)

    @triton.jit
    def reduce_with(x_ptr, out_ptr, BLOCK: tl.constexpr):
        values = tl.load(x_ptr + tl.arange(0, BLOCK)[:, None] * 4 + tl.arange(0, 4)[None, :])
        tl.store(out_ptr + tl.arange(0, BLOCK), tl.reduce(values, 1, maximum))

    maximum.fn.__module__ = triton_helpers.__name__
    globals()["maximum"] = maximum  # where the kernel finds it, as Inductor's kernels find triton_helpers'
    for helper in ("is_floating", "promote_to_tensor"):  # and torch's own helpers beside it: only its body differs
        globals()[helper] = getattr(triton_helpers, helper)
    x = torch.tensor([[1.0, 7.0, 3.0, 2.0]]).repeat(2, 1)
    out = torch.empty(2)
    reduce_with[(1,)](x, out, BLOCK=2)
    assert out.tolist() == [1.0, 1.0], "a same-named helper with another body was replaced by the fast path"
    assert "body is not torch's" in COMBINES.difference(maximum)

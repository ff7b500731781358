"""A reduction loop's iterations run together give the same bits as run one by one, and the ledger says so.

Compute mode folds ``L`` iterations of an Inductor reduction loop into one wide chunk where the kernel's
source shows a sum folded lane by lane (pytest_npu_lazy/cann/compute/loops.py; the kernels it refuses are
test/plugin/test_compute_loops.py). Here torch_npu's own generated kernels, compiled for a short reduction
and then called with a long one (torch_npu's ``test_sum.py`` does this: 8 elements, then 999,983), run both
ways on the emulated NPU that computes: every output bit equal, over values with NaN, infinities, signed
zeros and subnormals, and each wide launch did fold (a comparison of two one-by-one runs would pass and
prove nothing). Both of torch_npu's codegens are run: the no-linear codegen's loops (which a device runs wherever
the index codegen's TTIR check fails; testutils.write_with_the_no_linear_codegen makes it fail) and the index
codegen's loop over a full reduction (the one at its kernel's top level; its loops nested in a loop over rows run
iteration by iteration).
"""

from __future__ import annotations

import pytest

from testutils import MARKS, bits, kernels_since, write_with_the_no_linear_codegen


pytestmark = MARKS


def _special(tensor):
    """Values a reordered or pairwise sum would change the bits of: huge and tiny magnitudes, -0.0, subnormals."""

    if not tensor.is_floating_point():
        return tensor
    flat = tensor.view(-1)
    flat[::7] *= 1e30
    flat[3::11] = -0.0
    flat[5::13] = 1e-41
    return tensor


CASES = {
    # name: (short shape, long shape, dtype, function, what the long call's loop must say)
    # (test_sum.py sums 999,983 elements this way; the reference, iteration by iteration, takes 13 s at that size)
    "sum_1d": ((8,), (199_999,), "float32", lambda a: a.sum(), "together"),
    "sum_1d_nan_inf": ((8,), (65_536,), "float32", lambda a: a.sum(), "together"),
    "sum_rows": ((3, 8), (3, 12_000), "float32", lambda a: a.sum(1), "together"),
    "sum_int32": ((8,), (40_000,), "int32", lambda a: a.sum(), "together"),
    "sum_int64": ((8,), (40_000,), "int64", lambda a: a.sum(), "together"),
    "sum_float16": ((8,), (40_000,), "float16", lambda a: a.sum(), "together"),
    "mean": ((8,), (40_000,), "float32", lambda a: a.mean(), "together"),
    # 4,099 iterations (a prime) of 64 (compiled for 64 elements, the loop takes 64 at a time): no count of them but 1
    # divides the loop and fits a chunk's limit (2^18 elements: 4,096 iterations of 64)
    "sum_prime_iterations": ((64,), (64 * 4_099,), "float32", lambda a: a.sum(), "no divisor fits"),
}


def _input(shape, dtype, name):
    import torch

    if dtype.startswith("int"):
        tensor = torch.randint(-2**30, 2**30, shape, dtype=getattr(torch, dtype))  # int32 sums wrap, as the device's
    else:
        tensor = _special(torch.randn(shape, dtype=torch.float32) * 1000).to(getattr(torch, dtype))
    if name == "sum_1d_nan_inf" and tensor.numel() > 1000:
        tensor.view(-1)[100] = float("nan")
        tensor.view(-1)[200::5000] = float("inf")
    return tensor.npu()


@pytest.mark.parametrize("name", CASES)
def test_loop_iterations_run_together_give_the_bits_of_iterations_run_one_by_one(name, monkeypatch):
    write_with_the_no_linear_codegen(monkeypatch)  # its loops: for r0_offset in tl.range(0, r0_numel, R0_BLOCK)
    _both_schedules(name, monkeypatch, "no-linear codegen")


#: the index codegen writes a full reduction's loop at the kernel's top level (a row sum's sits inside its loop over
#: rows, which runs as written)
INDEX_CODEGEN_CASES = ["sum_1d", "sum_1d_nan_inf", "sum_int32", "sum_float16", "mean"]


@pytest.mark.parametrize("name", INDEX_CODEGEN_CASES)
def test_the_index_codegens_loop_over_a_reduction_folds_to_the_same_bits(name, monkeypatch):
    """torch_npu's index codegen writes ``loops_r0 = (r0_numel + R0BLOCK_SUB - 1) // R0BLOCK_SUB`` and ``for loop_r0
    in range(loops_r0)`` reading ``loop_r0 * R0BLOCK_SUB``: the same loop, whose iterations fold the same way."""
    _both_schedules(name, monkeypatch, "index codegen")


def _both_schedules(name, monkeypatch, codegen: str) -> None:
    import torch

    from pytest_npu_lazy.cann.compute import LEDGER, TRITON_INTERPRETER
    from pytest_npu_lazy.cann.compute.loops import ONE_BY_ONE_ENV

    short, long, dtype, fn, expected = CASES[name]
    x = _input(long, dtype, name)
    results, details = {}, {}
    for schedule in ("1", "0"):
        monkeypatch.setenv(ONE_BY_ONE_ENV, schedule)
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="inductor", dynamic=True)
        compiled(_input(short, dtype, name))  # compiled for the short reduction: its loop takes small chunks
        start = len(LEDGER.since(0))
        results[schedule] = compiled(x)
        assert kernels_since(start), "no Triton kernel ran: nothing was compared"
        details[schedule] = [e.detail for e in LEDGER.since(start) if e.by == TRITON_INTERPRETER]
    assert all(f"written by torch_npu's {codegen}" in d for d in details["0"]), details["0"]
    assert any("iteration by iteration (" in d for d in details["1"]), details["1"]
    assert any(expected in d for d in details["0"]), f"the loop did not say {expected!r}: {details['0']}"
    same = torch.equal(bits(results["0"]), bits(results["1"]))
    assert same, (f"{name}: loop iterations run together differ from one by one: {results['0']} against "
                  f"{results['1']} ({details['0']})")


#: a loop written by hand as Inductor writes one, with an accumulator of the type asked (float16, bfloat16: the
#: interpreter's own + and where fold them slice by slice; float32: NumPy)
KERNEL_DTYPES = ("float16", "bfloat16", "float32")


@pytest.mark.parametrize("dtype", KERNEL_DTYPES)
def test_a_loop_of_any_accumulator_type_folds_to_the_bits_of_its_iterations(dtype, monkeypatch):
    import torch
    import triton
    import triton.language as tl

    from pytest_npu_lazy.cann.compute import LEDGER, TRITON_INTERPRETER
    from pytest_npu_lazy.cann.compute.loops import ONE_BY_ONE_ENV

    @triton.jit
    def row_sum(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
        xoffset = tl.program_id(0) * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < xnumel
        r0_base = tl.arange(0, R0_BLOCK)[None, :]
        _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, in_ptr0.dtype.element_ty)
        for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
            r0_index = r0_offset + r0_base
            r0_mask = r0_index < r0_numel
            tmp0 = tl.load(in_ptr0 + (r0_index + r0_numel * xindex), r0_mask & xmask, other=0.0)
            tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
            tmp3 = _tmp2 + tmp1
            _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
        tmp2 = tl.sum(_tmp2, 1)[:, None]
        tl.store(out_ptr0 + xindex, tmp2, xmask)

    x = _special(torch.randn(3, 4000) * 100).to(getattr(torch, dtype)).npu()
    outputs, details = {}, {}
    for schedule in ("1", "0"):
        monkeypatch.setenv(ONE_BY_ONE_ENV, schedule)
        out = torch.empty(3, dtype=x.dtype).npu()
        start = len(LEDGER.since(0))
        row_sum[(1,)](x, out, 3, 4000, XBLOCK=4, R0_BLOCK=16)
        outputs[schedule] = out
        details[schedule] = [e.detail for e in LEDGER.since(start) if e.by == TRITON_INTERPRETER]
    assert any("250 iterations as" in d for d in details["0"]), details["0"]
    assert torch.equal(bits(outputs["0"]), bits(outputs["1"])), (outputs["0"], outputs["1"], details["0"])


def test_an_accumulator_the_sum_grows_by_broadcasting_folds_as_the_loop_grows_it(monkeypatch):
    """An accumulator of one row ([1, R0_BLOCK]) that ``acc + value`` of [XBLOCK, R0_BLOCK] grows: the fold takes the
    interpreter's own + and where slice by slice, as the loop does, and gives its bits."""
    import torch
    import triton
    import triton.language as tl

    from pytest_npu_lazy.cann.compute import LEDGER, TRITON_INTERPRETER
    from pytest_npu_lazy.cann.compute.loops import ONE_BY_ONE_ENV

    @triton.jit
    def growing(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr, R0_BLOCK: tl.constexpr):
        xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        xmask = xindex < xnumel
        r0_base = tl.arange(0, R0_BLOCK)[None, :]
        _tmp2 = tl.full([1, R0_BLOCK], 0, tl.float32)
        for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
            r0_index = r0_offset + r0_base
            r0_mask = r0_index < r0_numel
            tmp1 = tl.load(in_ptr0 + (r0_index + r0_numel * xindex), r0_mask & xmask, other=0.0)
            tmp3 = _tmp2 + tmp1
            _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
        tl.store(out_ptr0 + xindex, tl.sum(_tmp2, 1)[:, None], xmask)

    x = _special(torch.randn(4, 1000) * 100).npu()
    outputs, details = {}, {}
    for schedule in ("1", "0"):
        monkeypatch.setenv(ONE_BY_ONE_ENV, schedule)
        out = torch.empty(4).npu()
        start = len(LEDGER.since(0))
        growing[(1,)](x, out, 4, 1000, XBLOCK=4, R0_BLOCK=8)
        outputs[schedule] = out
        details[schedule] = [e.detail for e in LEDGER.since(start) if e.by == TRITON_INTERPRETER]
    assert any("125 iterations as" in d for d in details["0"]), details["0"]
    assert torch.equal(bits(outputs["0"]), bits(outputs["1"])), (outputs["0"], outputs["1"])


def test_the_fold_equals_the_iterated_where_bit_for_bit_and_keeps_a_lane_no_iteration_added_to():
    """``fold`` against ``acc = np.where(m, acc + v, acc)`` iteration after iteration (NumPy's float32 + is the
    interpreter's): random masks, NaNs with payloads on both sides, signed zeros, huge and tiny values; and a lane
    every iteration masks keeps a signalling NaN's bits (adding -0.0 would quiet it)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    from pytest_npu_lazy.cann.compute.loops import fold

    rng = np.random.default_rng(0)
    rows, step, together = 3, 8, 50
    acc = (rng.standard_normal((rows, step)) * 1e3).astype(np.float32)
    acc.view(np.uint32)[0, 0] = 0x7FA00001  # a signalling NaN: lane (0, 0) is masked in every iteration below
    acc[1, 1] = -0.0
    values = (rng.standard_normal((rows, step * together)) * np.float32(1e30) ** rng.integers(0, 2, (rows, step * together))
              ).astype(np.float32)
    values.view(np.uint32)[2, ::97] = 0x7FC00000 | rng.integers(1, 1 << 20, values[2, ::97].shape).astype(np.uint32)
    values[1, 3::11] = -0.0
    masks = rng.random((rows, step * together)) < 0.7
    masks[0, ::step] = False

    def block(data, dtype):
        return tl.tensor(TensorHandle(data, dtype), tl.block_type(dtype, list(data.shape)))

    expected = acc.copy()
    with np.errstate(all="ignore"):
        for i in range(together):
            piece = slice(i * step, (i + 1) * step)
            expected = np.where(masks[:, piece], expected + values[:, piece], expected)
        got = fold(block(acc, tl.float32), block(values, tl.float32), block(masks, tl.int1), step, step * together)
    got_bits, expected_bits = got.handle.data.view(np.uint32), expected.view(np.uint32)
    assert np.array_equal(got_bits, expected_bits), np.argwhere(got_bits != expected_bits)
    assert got_bits[0, 0] == 0x7FA00001

"""Which of a kernel's sub-block axes may run wide: read from its source, each refusal naming why.

``pytest_npu_lazy/cann/compute/widening.py`` launches torch_npu's index-codegen kernels with wider
``<A>BLOCK_SUB`` values where nothing in the kernel relates two elements along the axis. The kernel below is
the one torch_npu writes for test_sum_add.py's ``sum(a, 0) + b`` over (32, 64, 128, 2048); each test changes
one thing that could relate elements (or carry a value between sub-blocks) and checks the axis, or the whole
kernel, is kept as launched, with the reason. test/npu_kernels/test_widening.py checks the widened launches
bit for bit against the launches as given, on torch_npu's own kernels.
"""

from __future__ import annotations

import ast

import pytest

from pytest_npu_lazy.cann.compute import widening

#: torch_npu's index codegen's kernel for test_sum_add.py's sum(a, 0) + b (its signature and body, verbatim)
SUM_ADD = '''
def triton_per_fused_add_sum_0(in_out_ptr0, in_ptr0, in_ptr1, z0_numel, y1_numel, x2_numel, r3_numel, Z0BLOCK, Y1BLOCK, Z0BLOCK_SUB : tl.constexpr, Y1BLOCK_SUB : tl.constexpr, X2BLOCK_SUB : tl.constexpr):
    R3BLOCK_SUB: tl.constexpr = 32
    z0_offset = tl.program_id(0) * Z0BLOCK
    base_z0= tl.arange(0, Z0BLOCK_SUB)
    loops_z0 = (Z0BLOCK + Z0BLOCK_SUB - 1) // Z0BLOCK_SUB
    y1_offset = tl.program_id(1) * Y1BLOCK
    base_y1= tl.arange(0, Y1BLOCK_SUB)
    loops_y1 = (Y1BLOCK + Y1BLOCK_SUB - 1) // Y1BLOCK_SUB
    base_x2= tl.arange(0, X2BLOCK_SUB)
    loops_x2 = (x2_numel + X2BLOCK_SUB - 1) // X2BLOCK_SUB
    base_r3= tl.arange(0, R3BLOCK_SUB)
    loops_r3 = (r3_numel + R3BLOCK_SUB - 1) // R3BLOCK_SUB
    for loop_z0 in range(loops_z0):
        z0 = z0_offset + (loop_z0 * Z0BLOCK_SUB) + base_z0[None,:,None,None]
        z0_mask = z0 < min(Z0BLOCK+z0_offset, z0_numel)
        for loop_y1 in range(loops_y1):
            y1 = y1_offset + (loop_y1 * Y1BLOCK_SUB) + base_y1[None,None,:,None]
            y1_mask = y1 < min(Y1BLOCK+y1_offset, y1_numel)
            for loop_x2 in range(loops_x2):
                x2 = (loop_x2 * X2BLOCK_SUB) + base_x2[None,None,None,:]
                x2_mask = x2 < x2_numel
                r3 = base_r3[:,None,None,None]
                r3_mask = r3 < r3_numel
                tmp0 = tl.load(in_ptr0 + (x2 + 2048*y1 + 262144*z0 + 16777216*r3), x2_mask & y1_mask & z0_mask, other=0.0)
                tmp3 = tl.load(in_ptr1 + (x2 + 2048*y1 + 262144*z0), x2_mask & y1_mask & z0_mask)
                tmp2 = tl.sum(tmp0, 0).reshape(1, Z0BLOCK_SUB, Y1BLOCK_SUB, X2BLOCK_SUB)
                tmp4 = tmp2 + tmp3
                tl.store(in_out_ptr0 + (x2 + 2048*y1 + 262144*z0), tmp4, x2_mask & y1_mask & z0_mask)
'''
PARAMETERS = [a.arg for a in ast.parse(SUM_ADD.strip()).body[0].args.args]
STORE = "tl.store(in_out_ptr0 + (x2 + 2048*y1 + 262144*z0), tmp4, x2_mask & y1_mask & z0_mask)"


def plan(source: str) -> widening.Plan:
    return widening.plan_source(source, PARAMETERS)


def test_torch_npus_sum_add_kernel_widens_every_pointwise_axis_innermost_last_in_order():
    got = plan(SUM_ADD)
    assert got.axes == {"z0": "Z0BLOCK_SUB", "y1": "Y1BLOCK_SUB", "x2": "X2BLOCK_SUB"}, got
    # the extents of the loops that run (r3's count is computed, and no loop runs over it: its arange alone)
    assert got.extents == {"z0": "Z0BLOCK", "y1": "Y1BLOCK", "x2": "x2_numel"}, got
    assert got.order == ["z0", "y1", "x2"] and got.constants == {"R3BLOCK_SUB": 32} and not got.reason, got
    # the store's address, axis by axis: each index's coefficient as its factors (constants, parameters); and the
    # axes its mask bounds to their extents (x2_mask = x2 < x2_numel, z0_mask = z0 < min(Z0BLOCK+z0_offset, ...))
    assert got.stores == [((("x2", ()), ("y1", ("2048",)), ("z0", ("262144",))), ("x2", "y1", "z0"))], got
    assert got.masked == ["x2", "y1", "z0"], got  # every load and store under each axis's own mask


@pytest.mark.parametrize("change, kept, reason", [
    (("tl.sum(tmp0, 0).reshape(1, Z0BLOCK_SUB, Y1BLOCK_SUB, X2BLOCK_SUB)", "tl.sum(tmp0, 1, keep_dims=True)"), "z0",
     "reduces along z0"),
    (("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tl.cumsum(tmp3, 3)"), "x2", "reduces along x2"),
    ((STORE, "tl.store(in_out_ptr0 + (x2 + 2048*y1), tmp4, x2_mask & y1_mask & z0_mask)"), "z0",
     "a store's address does not depend on z0"),
    (("x2_mask = x2 < x2_numel", "x2_mask = (x2 < x2_numel) & (loop_x2 < 4)"), "x2",
     "computes with x2's sub-blocks"),
    (("    base_x2= tl.arange(0, X2BLOCK_SUB)", "    base_x2= tl.arange(0, X2BLOCK_SUB)\n    first_x2 = base_x2 + 1"),
     "x2", "x2's arange is used other than in its index"),
    (("    loops_x2 = (x2_numel + X2BLOCK_SUB - 1) // X2BLOCK_SUB",
      "    loops_x2 = (x2_numel + X2BLOCK_SUB - 1) // X2BLOCK_SUB\n    half_x2 = X2BLOCK_SUB // 2"),
     "x2", "computes with x2's sub-blocks"),
    (("            for loop_x2 in range(loops_x2):", "            seen = tl.zeros([1, 1, 1, X2BLOCK_SUB], tl.float32)\n"
      "            for loop_x2 in range(loops_x2):\n                seen = seen + 1.0"), "x2",
     "seen is carried from one of x2's sub-blocks to the next"),
    (("                r3_mask = r3 < r3_numel", "                r3_mask = r3 < r3_numel\n"
      "                if loop_y1 == 0:\n                    r3_mask = r3_mask & r3_mask"), "y1",
     "loop_y1 == 0 computes with y1's sub-blocks"),
])
def test_an_axis_whose_elements_could_meet_keeps_its_sub_blocks_and_the_others_still_widen(change, kept, reason):
    old, new = change
    assert old in SUM_ADD
    got = plan(SUM_ADD.replace(old, new, 1))
    assert kept not in got.axes and reason in got.reason, got
    assert got.axes, f"every axis was kept, where only {kept} had to be: {got.reason}"


def test_a_value_of_the_loops_read_after_them_keeps_every_axis_that_wrote_it():
    got = plan(SUM_ADD + "    tl.device_assert(tmp4 == tmp4)\n")
    assert got.axes == {} and "tmp4, assigned in z0's loop, is used outside it" in got.reason, got


@pytest.mark.parametrize("change, reason", [
    (("tmp4 = tmp2 + tmp3", "tmp4 = tl.permute(tmp2, (0, 1, 3, 2)) + tmp3"), "calls tl.permute, which this check does not know"),
    (("tmp4 = tmp2 + tmp3", "tmp4 = triton_helpers.unknown_helper(tmp2) + tmp3"), "does not know"),
    (("tmp4 = tmp2 + tmp3", "tmp4 = my_helper(tmp2) + tmp3"), "calls my_helper(), which this check cannot read"),
    (("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3\n                tl.atomic_add(in_ptr1 + x2, tmp4)"), "atomic_add"),
    (("tmp3 = tl.load(in_ptr1 + (x2 + 2048*y1 + 262144*z0)", "tmp3 = tl.load(in_out_ptr0 + (x2 + 2048*y1 + 1)"),
     "in_out_ptr0 is loaded and stored at different addresses"),
    (("tmp2 = tl.sum(tmp0, 0).reshape(1, Z0BLOCK_SUB, Y1BLOCK_SUB, X2BLOCK_SUB)",
      "tmp2 = tl.sum(tmp0, 0).reshape(1, Y1BLOCK_SUB, Z0BLOCK_SUB, X2BLOCK_SUB)"), "moves elements between axes"),
    (("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3.reshape(1, Z0BLOCK_SUB * Y1BLOCK_SUB * X2BLOCK_SUB)"),
     "a size Z0BLOCK_SUB * Y1BLOCK_SUB * X2BLOCK_SUB this check cannot follow"),
])
def test_a_kernel_that_could_move_or_order_elements_runs_as_launched(change, reason):
    old, new = change
    assert old in SUM_ADD
    got = plan(SUM_ADD.replace(old, new, 1))
    assert got.axes == {} and reason in got.reason, got


class _Launch:
    """What the interpreter's launch hands :func:`widening.widths`: the kernel and its parameter names."""

    def __init__(self) -> None:
        namespace: dict = {}
        exec(compile("tl = None\n" + SUM_ADD.strip() + "\n", "<kernel>", "exec"), namespace)
        self.fn = namespace["triton_per_fused_add_sum_0"]
        self.arg_names = PARAMETERS


def test_the_launch_widens_innermost_first_in_powers_of_two_within_the_block_limit(monkeypatch):
    monkeypatch.setattr(widening, "plan", lambda fn, names: widening.plan_source(SUM_ADD, names))
    monkeypatch.delenv(widening.AS_LAUNCHED_ENV, raising=False)
    launch = _Launch()
    args = (None, None, None, 64, 128, 2048, 32)
    kwargs = {"Z0BLOCK": 2, "Y1BLOCK": 128, "Z0BLOCK_SUB": 1, "Y1BLOCK_SUB": 32, "X2BLOCK_SUB": 16}
    wider, said = widening.widths(launch, args, kwargs)
    # 32 (R3) * 1 * 32 * 16 = 16,384 elements launched; x2 grows to 1024 and the block reaches Triton's 2^20
    assert wider == {"X2BLOCK_SUB": 1024} and said == "sub-blocks widened: x2 16 -> 1024: 1024 iterations as 16", said
    wider, said = widening.widths(launch, args, {**kwargs, "Y1BLOCK_SUB": 1})
    assert wider == {"X2BLOCK_SUB": 2048, "Y1BLOCK_SUB": 16}, (wider, said)
    # every load and store is masked by x2's own mask: past its extent x2 touches no memory, so an extent of 100
    # launched in sub-blocks of 16 (112 indices) widens to 128
    odd = (None, None, None, 64, 128, 100, 32)
    spanning = {**kwargs, "Z0BLOCK_SUB": 2, "Y1BLOCK_SUB": 128}
    assert widening.widths(launch, odd, spanning)[0] == {"X2BLOCK_SUB": 128}
    # one load not masked by x2's mask: a wider sub-block must touch the same indices as launched; 32 would touch 128
    unmasked = SUM_ADD.replace(LOAD3, "tmp3 = tl.load(in_ptr1 + (x2 + 2048*y1 + 262144*z0), y1_mask & z0_mask)")
    assert widening.plan_source(unmasked, PARAMETERS).masked == ["y1", "z0"]
    monkeypatch.setattr(widening, "plan", lambda fn, names: widening.plan_source(unmasked, names))
    assert widening.widths(launch, odd, spanning) == (
        {}, "sub-blocks as launched: no wider sub-block touches the same indices within the size limit")
    assert widening.widths(launch, (None, None, None, 64, 128, 96, 32), spanning)[0] == {
        "X2BLOCK_SUB": 32}  # 96 = 6 * 16 = 3 * 32: the same 96 indices; 64 would touch 128
    monkeypatch.setattr(widening, "plan", lambda fn, names: widening.plan_source(SUM_ADD, names))
    monkeypatch.setenv(widening.AS_LAUNCHED_ENV, "1")
    assert widening.widths(launch, args, kwargs) == ({}, f"sub-blocks as launched ({widening.AS_LAUNCHED_ENV}=1)")


def test_a_dynamic_shapes_strides_are_read_at_the_launch(monkeypatch):
    """A dynamic shape's kernel multiplies its indices by size parameters (``ks0*x2``): the address is one-to-one
    for the sizes of one launch and not for another's, and the launch decides with its own."""
    source = SUM_ADD.replace(STORE, f"tl.store(in_out_ptr0 + (x2 + y1_numel*x2_numel*z0 + x2_numel*y1), tmp4, {M})")
    got = plan(source)
    assert got.stores == [((("x2", ()), ("y1", ("x2_numel",)), ("z0", ("x2_numel", "y1_numel"))), ("x2", "y1", "z0"))]
    monkeypatch.setattr(widening, "plan", lambda fn, names: widening.plan_source(source, names))
    monkeypatch.delenv(widening.AS_LAUNCHED_ENV, raising=False)
    kwargs = {"Z0BLOCK": 2, "Y1BLOCK": 128, "Z0BLOCK_SUB": 1, "Y1BLOCK_SUB": 32, "X2BLOCK_SUB": 16}
    assert widening.widths(_Launch(), (None, None, None, 64, 128, 2048, 32), kwargs)[0] == {"X2BLOCK_SUB": 1024}
    # y1's stride x2_numel = 2048 but y1_numel passed as 1: z0's stride 2048 meets y1's second row
    assert widening.widths(_Launch(), (None, None, None, 64, 1, 2048, 32), kwargs) == (
        {}, "sub-blocks as launched: a store's address could repeat within a program's block")


def test_a_launch_whose_tensors_share_memory_or_whose_sub_blocks_span_their_axes_runs_as_launched(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(widening, "plan", lambda fn, names: widening.plan_source(SUM_ADD, names))
    monkeypatch.delenv(widening.AS_LAUNCHED_ENV, raising=False)
    launch = _Launch()
    base = torch.zeros(64)
    kwargs = {"Z0BLOCK": 2, "Y1BLOCK": 128, "Z0BLOCK_SUB": 1, "Y1BLOCK_SUB": 32, "X2BLOCK_SUB": 16}
    shared = (base[:32], base[16:48], torch.zeros(4), 64, 128, 2048, 32)
    assert widening.widths(launch, shared, kwargs) == ({}, "sub-blocks as launched: two tensor arguments share memory")
    spanning = {**kwargs, "Z0BLOCK_SUB": 2, "Y1BLOCK_SUB": 128, "X2BLOCK_SUB": 2048}
    assert widening.widths(launch, (None, None, None, 64, 128, 2048, 32), spanning) == (
        {}, "sub-blocks as launched: each spans its axis already")


def test_the_check_mode_fails_naming_the_kernel_and_argument_where_a_widened_launch_writes_other_bits():
    """``run_both_ways`` restores the memory between the two runs and compares every bit: a launch whose widened
    run writes another value fails; one that writes the same passes and returns the widened run's result."""
    torch = pytest.importorskip("torch")
    out, source = torch.zeros(4), torch.arange(4.0)

    def run(kwargs):
        out.add_(source * kwargs["X2BLOCK_SUB"] / kwargs["X2BLOCK_SUB"])  # reads what it wrote: the memory is reset
        return "ran"

    assert widening.run_both_ways(run, "k", (out, source), {"X2BLOCK_SUB": 2}, {"X2BLOCK_SUB": 8},
                                  lambda t: t) == "ran"
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0], "the widened run did not start from the memory as launched"

    def wrong(kwargs):
        out.copy_(source + (kwargs["X2BLOCK_SUB"] > 2) * torch.tensor([0.0, 0.0, 2.0 ** -20, 0.0]))

    with pytest.raises(widening.WideningChanged, match=r"Triton kernel k: .* argument 0 \(1 elements differ\)"):
        widening.run_both_ways(wrong, "k", (out, source), {"X2BLOCK_SUB": 2}, {"X2BLOCK_SUB": 8}, lambda t: t)


M = "x2_mask & y1_mask & z0_mask"
A = "x2 + 2048*y1 + 262144*z0"
LOAD3 = "tmp3 = tl.load(in_ptr1 + (x2 + 2048*y1 + 262144*z0), x2_mask & y1_mask & z0_mask)"


#: a review's kernels that the first reading let widen although a wider sub-block would write other bits (or
#: other memory): each must now keep its sub-blocks, saying why
@pytest.mark.parametrize("old, new, reason", [
    (STORE, f"tmp5 = tl.load(in_out_ptr0 + (x2 % 4 + 2048*y1 + 262144*z0))\n                "
            f"tl.store(in_out_ptr0 + (x2 % 4 + 2048*y1 + 262144*z0), tmp5 + tmp4, {M})",
     "not in_out_ptr0 plus axis indices times constants"),
    (STORE, STORE + f"\n                tl.store(in_out_ptr0 + (x2 + 1 + 2048*y1 + 262144*z0), tmp3, {M})",
     "in_out_ptr0 is stored at different addresses"),
    (STORE, f"off = {A}\n                tmp5 = tl.load(in_out_ptr0 + off)\n                off = off + 1\n"
            f"                tl.store(in_out_ptr0 + off, tmp5 + tmp4, {M})", "plus axis indices times constants"),
    (STORE, f"out1 = in_out_ptr0 + 1\n                tl.store(out1 + ({A}), tmp4, {M})",
     "the pointer in_out_ptr0 is used other than as the start"),
    (STORE, f"tmp5 = tl.load(z0_numel*0 + in_out_ptr0 + ({A}), {M})\n                "
            f"tl.store(in_out_ptr0 + (x2 + 1 + 2048*y1 + 262144*z0), tmp5 + tmp4, {M})",
     "in_out_ptr0 is loaded and stored at different addresses"),
    (STORE, STORE + "\n                return", "a Return statement"),
    (STORE, f"if tmp4 != 0:\n                    {STORE}", "tests a block"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tl.where((tmp3 > 0) and (tmp2 > 0), tmp2, tmp3)", "takes the truth of a block"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tl.where(0.0 < tmp3 < 1.0, tmp2, tmp3)", "takes the truth of a block"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 if tmp3 > 0 else tmp3", "takes the truth of a block"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tl.softmax(tmp3)", "calls tl.softmax"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tl.topk(tmp3, 8)", "calls tl.topk"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + libdevice.set_element(tmp3, 0, 0.0)", "calls libdevice.set_element"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + triton.language.cumsum(tmp3, 3)",
     "triton.language: an attribute this check cannot follow"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tl.standard.cumsum(tmp3, 3)", "a method this check cannot follow"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3 * tmp3.numel", "an attribute this check cannot follow"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3 * max(tmp3.shape)", "an attribute this check cannot follow"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3.T", "an attribute this check cannot follow"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + triton_helpers.max2(a=tmp3, dim=3)", "its operands and axis not in place"),
    (LOAD3, f"{LOAD3}\n                tmp5 = tmp3 + x2.reshape(X2BLOCK_SUB, 1, 1, 1)", "holds one axis in two positions"),
    ("    base_x2= tl.arange", "    x2_numel = x2_numel - 16\n    base_x2= tl.arange", "x2_numel is assigned"),
    ("tl.sum(tmp0, 0)", "tl.sum(axis=0)", "its input not where this check reads it"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tl.sum(tmp3, 5)", "not a constant of the block"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tl.sum(tmp3, 0, True)", "options this check does not read"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3\n                for i in my_range(4):\n                    pass",
     "a loop at line"),
])
def test_a_kernel_a_review_found_widening_would_change_keeps_its_sub_blocks(old, new, reason):
    assert old in SUM_ADD
    got = plan(SUM_ADD.replace(old, new, 1))
    assert reason in got.reason and not {"x2", "y1", "z0"} <= set(got.axes), got


def test_a_source_that_is_not_a_def_or_names_an_axis_twice_is_read_as_not_widenable():
    assert set(plan(SUM_ADD.replace("tl.sum(tmp0, 0)", "tl.sum(input=tmp0, axis=0)")).axes) == {"x2", "y1", "z0"}
    assert widening.plan_source("kernel = triton.jit(lambda x: x)", ["x"]).reason == "its source is not a def"
    assert "two BLOCK_SUB parameters name one axis" in widening.plan_source(
        SUM_ADD, PARAMETERS + ["x2BLOCK_SUB"]).reason


def test_a_store_whose_address_repeats_within_a_block_or_a_tensor_passed_twice_runs_as_launched(monkeypatch):
    """A store's address is checked with the launch's sizes to give each element of a program's block its own
    address (``0*x2`` gives one address to every x2; ``x2 + 16*y1`` repeats once x2 runs past 16); a tensor passed
    as two arguments would let a load of one pointer see a store of the other."""
    torch = pytest.importorskip("torch")
    monkeypatch.delenv(widening.AS_LAUNCHED_ENV, raising=False)
    launch = _Launch()
    kwargs = {"Z0BLOCK": 2, "Y1BLOCK": 128, "Z0BLOCK_SUB": 1, "Y1BLOCK_SUB": 32, "X2BLOCK_SUB": 16}
    args = (None, None, None, 64, 128, 2048, 32)
    for address in ("0*x2 + 2048*y1 + 262144*z0", "x2 + 16*y1 + 262144*z0"):
        source = SUM_ADD.replace(STORE, f"tl.store(in_out_ptr0 + ({address}), tmp4, {M})")
        monkeypatch.setattr(widening, "plan", lambda fn, names, source=source: widening.plan_source(source, names))
        assert widening.widths(launch, args, kwargs) == (
            {}, "sub-blocks as launched: a store's address could repeat within a program's block"), address
    monkeypatch.setattr(widening, "plan", lambda fn, names: widening.plan_source(SUM_ADD, names))
    same = torch.zeros(8)
    assert widening.widths(launch, (torch.zeros(4), same, same, 64, 128, 2048, 32), kwargs) == (
        {}, "sub-blocks as launched: two tensor arguments share memory")


@pytest.mark.parametrize("mask, bounded", [
    ("x2_mask & y1_mask & z0_mask", ("x2", "y1", "z0")),
    ("x2_mask & y1_mask", ("x2", "y1")),
    ("y1_mask & (x2 < 4096) & z0_mask", ("y1", "z0")),  # not x2's own mask: x2 may run to its sub-blocks' end
])
def test_a_store_under_an_axis_mask_writes_at_most_the_axis_extent(mask, bounded):
    got = plan(SUM_ADD.replace(STORE, f"tl.store(in_out_ptr0 + ({A}), tmp4, {mask})"))
    assert got.stores[0][1] == bounded, got


def test_a_mask_bounds_its_axis_only_where_it_compares_the_index_with_its_own_extent():
    """``z0 < min(Z0BLOCK + z0_offset, ...)`` bounds z0 to Z0BLOCK indices because z0 is offset by z0_offset; with
    another offset, or another extent, the mask bounds nothing."""
    other_offset = SUM_ADD.replace("z0_mask = z0 < min(Z0BLOCK+z0_offset, z0_numel)",
                                   "z0_mask = z0 < min(Z0BLOCK+y1_offset, z0_numel)")
    assert plan(other_offset).stores[0][1] == ("x2", "y1"), plan(other_offset)
    other_extent = SUM_ADD.replace("x2_mask = x2 < x2_numel", "x2_mask = x2 < y1_numel")
    assert plan(other_extent).stores[0][1] == ("y1", "z0"), plan(other_extent)


X2_MASK = "                x2_mask = x2 < x2_numel"


#: a second review's kernels, each checked in Triton's interpreter to write other bits once widened as the reading
#: then allowed: a mask no longer bounding its axis must not count, an index or extent read wrong must not either
@pytest.mark.parametrize("old, new, check", [
    (X2_MASK, X2_MASK + "\n                x2_mask |= x2 < 4096", lambda got: "x2" not in got.masked),
    (X2_MASK, X2_MASK + "\n                x2_mask: tl.int1 = x2 < 4096", lambda got: "x2" not in got.masked),
    (X2_MASK, X2_MASK + "\n                x2_mask, unused = x2 < 4096, 0", lambda got: "x2" not in got.masked),
    (X2_MASK, "                if z0_numel > 0:\n                    x2_mask = x2 < 4096\n                else:\n"
              "                    x2_mask = x2 < x2_numel", lambda got: "x2" not in got.masked),
    ("x2 = (loop_x2 * X2BLOCK_SUB)", "x2 = (0 - 64) + (loop_x2 * X2BLOCK_SUB)", lambda got: "x2" not in got.masked),
    ("min(Z0BLOCK+z0_offset, z0_numel)", "min(Z0BLOCK+z0_offset+z0_offset, z0_numel)",
     lambda got: "z0" not in got.masked),
    (STORE, f"x2s = (loop_x2 * X2BLOCK_SUB) + (0 - 1) + base_x2[None,None,None,:]\n                "
            f"tmp5 = tl.load(in_out_ptr0 + (x2s + 2048*y1 + 262144*z0), {M})\n                "
            f"tl.store(in_out_ptr0 + ({A}), tmp4 + tmp5, {M})",
     lambda got: "in_out_ptr0 is loaded and stored at different addresses" in got.reason and not got.axes),
    ("    base_r3= tl.arange", "    junk = (z0_numel + X2BLOCK_SUB - 1) // X2BLOCK_SUB\n    base_r3= tl.arange",
     lambda got: got.extents["x2"] == "x2_numel"),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3 + (loop_x2 * Y1BLOCK_SUB)",
     lambda got: not {"x2", "y1"} & set(got.axes) and "z0" in got.axes),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3 + (R3BLOCK_SUB * loop_x2)", lambda got: "x2" not in got.axes),
    ("tmp4 = tmp2 + tmp3", "tmp4 = tmp2 + tmp3 * (R3BLOCK_SUB * X2BLOCK_SUB)", lambda got: "x2" not in got.axes),
    ("tl.sum(tmp0, 0)", "tl.sum((), 0)", lambda got: "reduces nothing" in got.reason),
])
def test_a_kernel_a_second_review_found_keeps_what_it_must(old, new, check):
    assert old in SUM_ADD
    got = plan(SUM_ADD.replace(old, new, 1))
    assert check(got), got

